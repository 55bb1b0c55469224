"""Repetitions of a phase on up to ``--workers`` at once.

Each repetition already owns everything it runs on (worktree, network, firewall, proxy,
resolver, containers, cleanup stack), so a worker is a thread that runs one
``Repetition`` at a time; only the report is shared. Fault decisions are a function of the
seed and the repetition index (decisions.py), never of which worker ran it or when, and
the records come back in index order, so a parallel run reports what a serial one does.

The serial rules hold: a repetition that aborts or fails ends the run, and in the baseline
one that fails verify means no further repetition starts. In parallel, ending the run also
stops the repetitions still going (within a second: they check ``Shared.run_ended`` while
their containers run) and records them as stopped; a failed baseline lets them finish.
Ctrl-C reaches the main thread, which ends the run the same way and waits for every worker
to clean up before it unwinds.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from mitmchaos.cleanup import signals_deferred
from mitmchaos.records import Phase, RepetitionRecord
from mitmchaos.run import Progress, Repetition, Shared


@dataclass
class _Finished:
    slot: int
    index: int
    record: RepetitionRecord | None
    error: BaseException | None  # a runner bug in the worker: re-raised in the main thread


class _Discard:
    """The terminal of a worker: several sandboxes' output interleaved would be unreadable."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def run_phase(shared: Shared, phase: Phase, numbered_from: int, artifacts: Path) -> list[RepetitionRecord]:
    """The phase's repetitions (numbered after ``numbered_from`` in the progress lines), in index order."""
    if shared.settings.workers <= 1:
        return _serial(shared, phase, numbered_from, artifacts)
    return _parallel(shared, phase, numbered_from, artifacts)


def _ends_run(shared: Shared, record: RepetitionRecord, number: int) -> bool:
    if record.abort or record.error:
        shared.progress.say(f"run ends: repetition {number} {'aborted' if record.abort else 'failed'}")
        return True
    return False


def _serial(shared: Shared, phase: Phase, numbered_from: int, artifacts: Path) -> list[RepetitionRecord]:
    records = []
    for index in range(shared.plan.repeat):
        number = numbered_from + index + 1
        record = repetition_type(shared)(shared, phase, index, number, artifacts).run()
        records.append(record)
        if _ends_run(shared, record, number) or (phase == "baseline" and record.verify_exit != 0):
            break
    return records


def _parallel(shared: Shared, phase: Phase, numbered_from: int, artifacts: Path) -> list[RepetitionRecord]:
    workers = min(shared.settings.workers, shared.plan.repeat)
    if numbered_from == 0:
        shared.progress.say(f"{workers} workers; each sandbox's output goes to its repetition's "
                            "agent.out and agent.err, not here")
    pending = list(range(shared.plan.repeat))
    free_slots = list(range(workers, 0, -1))
    running: dict[int, threading.Thread] = {}
    finished: queue.Queue[_Finished] = queue.Queue()
    records: dict[int, RepetitionRecord] = {}
    starting = True

    def work(slot: int, index: int) -> None:
        try:
            record = repetition_type(shared)(_for_worker(shared, slot), phase, index, numbered_from + index + 1,
                                             artifacts).run()
            finished.put(_Finished(slot, index, record, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            finished.put(_Finished(slot, index, None, exc))

    try:
        while running or (pending and starting):
            while pending and free_slots and starting:
                slot, index = free_slots.pop(), pending.pop(0)
                running[index] = threading.Thread(target=work, args=(slot, index), daemon=True,
                                                  name=f"mitmchaos-worker-{slot}")
                running[index].start()
            try:
                done = finished.get(timeout=0.5)  # a timeout, so a signal is handled promptly
            except queue.Empty:
                continue
            running.pop(done.index).join()
            free_slots.append(done.slot)
            if done.error is not None:
                raise done.error
            records[done.index] = done.record
            if shared.run_ended.is_set():
                continue  # already ending: this one was stopped, or finished as it was
            if _ends_run(shared, done.record, numbered_from + done.index + 1):
                shared.run_ended.set()
                starting = False
            elif phase == "baseline" and done.record.verify_exit != 0:
                starting = False
    except BaseException:
        shared.run_ended.set()
        with signals_deferred():  # every worker cleans up before the run's own resources go
            for thread in running.values():
                thread.join()
        raise
    return [records[index] for index in sorted(records)]


def repetition_type(shared: Shared) -> type[Repetition]:
    if shared.settings.backend == "kube":
        from mitmchaos.kube import KubeRepetition  # it builds on run.py too

        return KubeRepetition
    return Repetition


def _for_worker(shared: Shared, slot: int) -> Shared:
    """The shared run, but progress lines that name the worker and a terminal of its own."""
    progress = Progress(shared.progress.stream, shared.progress.total)
    progress.started = shared.progress.started
    progress.worker = f", worker {slot}"
    settings = replace(shared.settings, terminal=_Discard(), terminal_err=_Discard())
    return replace(shared, settings=settings, progress=progress)
