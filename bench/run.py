"""``make bench``: every benchmark, side by side, into bench/results/latest.md and latest.json.

python -m bench.run                   # the full set, a few minutes
python -m bench.run --quick           # tiny sizes: checks the harness, not the machine
python -m bench.run --only requests,streaming
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mitmchaos.log import configure_logging

from bench import repetition, request_overhead, scoring, streaming
from bench.results import Figure, write

RESULTS = Path(__file__).with_name("results")

# name -> (function, full-size arguments, quick arguments)
BENCHMARKS = {
    "requests": (request_overhead.run, {"rounds": 10, "requests": 80}, {"rounds": 2, "requests": 10}),
    "streaming": (streaming.run, {"rounds": 10, "chunk_delay_s": 0.05}, {"rounds": 2, "chunk_delay_s": 0.005}),
    "repetition": (repetition.run, {"repetitions": 3}, {"repetitions": 1}),
    "scoring": (
        scoring.run,
        {"total_lines": 1_000_000, "repetitions": 40, "rounds": 3},
        {"total_lines": 4_000, "repetitions": 40, "rounds": 1},
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help="comma-separated: " + ", ".join(BENCHMARKS)
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for latest.md and latest.json")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    configure_logging()  # the runner's cleanup debug lines would drown the progress
    figures: list[Figure] = []
    settings = {}
    loads = [os.getloadavg()[0]]
    for name in names:
        function, full, quick = BENCHMARKS[name]
        kwargs = quick if args.quick else full
        settings[name] = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        started = time.monotonic()
        print(f"bench: {name} ({settings[name]})", file=sys.stderr, flush=True)
        figures += function(**kwargs)
        print(f"bench: {name} took {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        loads.append(os.getloadavg()[0])
    md, js = write(figures, args.out, settings, loads)
    print(md.read_text())
    print(f"bench: wrote {md} and {js}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
