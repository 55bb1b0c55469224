"""The fake model upstream (runner/model_server.py) in its own process, so the benchmark
client and the server never share a GIL.

    python -m bench.upstream --words 14 --chunk-delay 0.05    # prints its URL, serves until SIGTERM
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path
from typing import Self

from mitmchaos.model_server import ModelServer, Turn

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--words", type=int, default=8, help="words in every reply (one SSE delta each)")
    parser.add_argument("--chunk-delay", type=float, default=0.05, help="seconds between SSE events")
    args = parser.parse_args()
    text = " ".join(f"word{i}" for i in range(args.words))
    server = ModelServer(lambda body, provider: Turn(text=text), chunk_delay_s=args.chunk_delay)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # taken by sigwait, as the resolver does
    with server:
        print(server.url, flush=True)
        signal.sigwait({signal.SIGTERM})


class Upstream:
    """Start ``python -m bench.upstream`` and stop it (by its own pid) on exit."""

    def __init__(self, words: int = 8, chunk_delay_s: float = 0.05) -> None:
        self.args = ["--words", str(words), "--chunk-delay", str(chunk_delay_s)]
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> Self:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.upstream", *self.args], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.__exit__()
            raise RuntimeError("the bench upstream did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


if __name__ == "__main__":
    main()
