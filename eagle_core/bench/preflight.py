"""Before a timed run: refuse a busy machine (machine_load.py), and how the benchmark's commands fail.

Before loading anything a benchmark command measures the other work on the machine and refuses to run (exit
status 3) while it keeps more than 0.25 cores busy for --wait-quiet seconds, unless --allow-busy; a run that was
not quiet is then marked BUSY in the report.
"""
from __future__ import annotations

import sys
import time

from . import machine_load
from .machine_load import BUSY_CORES


def fail(msg: str, code: int = 2) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def check_quiet(wait_s: float, allow_busy: bool) -> tuple[float | None, int | None]:
    """The check before a run: (other work in cores, None to go on) or (reading, exit status 3) after the
    refusal was printed. With allow_busy a busy machine is announced and the run goes on (marked BUSY)."""
    before = wait_for_quiet(wait_s)
    if before is None or before <= BUSY_CORES:
        return before, None
    msg = (f"the machine is busy: other work keeps {before:.2f} of {machine_load.cores()} cores busy "
           f"(waited {wait_s:.0f} s for it to stop). Timings taken beside it are not evidence")
    if not allow_busy:
        return before, fail(msg + "; stop the other work, or pass --allow-busy to run anyway (the report is "
                            "then marked BUSY)", code=3)
    print(f"WARNING: {msg}; running anyway (--allow-busy), the report is marked BUSY", file=sys.stderr)
    return before, None


def wait_for_quiet(wait_s: float, probe_s: float = 2.0) -> float | None:
    """Other work (in cores) on the machine, re-checked every probe_s for up to wait_s until it is below
    BUSY_CORES; returns the last reading (None where it cannot be measured)."""
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        other = machine_load.measure_idle(probe_s)
        if other is None or other <= BUSY_CORES or time.monotonic() >= deadline:
            return other
        print(f"waiting for a quiet machine: other work holds {other:.2f} cores ...", file=sys.stderr)
