"""How much of the machine other work takes while the benchmark times something.

A speedup is a ratio of two timings taken one after the other; when another job shares the cores, one of them
is slowed and the ratio turns to noise (on the 2-core dev machine a busy neighbour once turned eagle-chain's
1.4x into "3.48x"). So the benchmark measures the competition instead of hoping for a quiet machine:

    other cores = (CPU time all processes used - CPU time this process used + time the hypervisor stole) / wall

from /proc/stat and the process's own clock, over every timed stretch. A method that runs in other processes
(vLLM's engine, bench/vllm.py) names them, and a child process the benchmark waited for (llama.cpp's tools,
bench/llamacpp.py) counts as its own: their CPU time counts as the benchmark's own while that method is
timed, and as other work while any other method is. 0.0 is a quiet machine; 1.0 means one
core's worth of other work ran beside the benchmark. Where /proc/stat is missing (macOS, Windows) the 1-minute
load average minus this process's threads stands in, flagged as approximate.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

BUSY_CORES = 0.25        # more other work than this, as a mean over a timed stretch, makes the stretch "busy"


def _proc_stat() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, seconds stolen by the hypervisor) since boot, or None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    v = [int(x) for x in fields[1:]]
    v += [0] * (10 - len(v))
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    # guest time is already inside user/nice
    return (user + nice + system + irq + softirq) / hz, steal / hz


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class Sample:
    wall: float
    own_cpu: float
    stat: tuple[float, float] | None
    loadavg: float | None


def proc_stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the process name (fields 3 onwards: state, ppid, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()   # the name (2nd field) may hold spaces
    except (OSError, IndexError):
        return None


def pids_cpu_seconds(pids) -> float:
    """CPU seconds (user + system) the live processes `pids` have used so far (0 for one that is gone)."""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for pid in pids:
        fields = proc_stat_fields(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])       # utime, stime: the 14th and 15th fields
    return total / hz


def beside(fn, pids=()):
    """(fn(), the other work in cores while it ran): `pids` are processes whose CPU time is fn's own."""
    s0 = sample(pids)
    out = fn()
    return out, other_cores(s0, sample(pids))


def sample(pids=()) -> Sample:
    """The clocks now; `pids`: other processes whose CPU time is this benchmark's own (a method's engine)."""
    try:
        la = os.getloadavg()[0]
    except (AttributeError, OSError):
        la = None
    # a method run as a child process per generation (llama.cpp's tools) counts as ours once it is waited for
    t = os.times()
    own = time.process_time() + t.children_user + t.children_system + (pids_cpu_seconds(pids) if pids else 0.0)
    return Sample(time.perf_counter(), own, _proc_stat(), la)


def other_cores(a: Sample, b: Sample) -> float | None:
    """Cores' worth of other work between two samples (>= 0), or None when it cannot be told."""
    wall = b.wall - a.wall
    if wall <= 0:
        return None
    if a.stat is not None and b.stat is not None:
        busy = b.stat[0] - a.stat[0]
        steal = b.stat[1] - a.stat[1]
        own = b.own_cpu - a.own_cpu
        return max(0.0, (busy - own + steal) / wall)
    if b.loadavg is not None:
        return max(0.0, b.loadavg - 1.0)   # approximate: the benchmark itself is ~1 runnable task
    return None


def exact() -> bool:
    """Whether other_cores reads /proc/stat (exact) or falls back on the load average (approximate)."""
    return _proc_stat() is not None


def measure_idle(seconds: float = 1.0) -> float | None:
    """Other work on the machine over `seconds` while this process sleeps (the check before a run)."""
    a = sample()
    time.sleep(seconds)
    return other_cores(a, sample())


def summarize(before: float | None, stretches: list[float | None], threshold: float = BUSY_CORES) -> dict:
    """The JSON record of a run's competition: before, mean and max during, busy stretches, and the verdict."""
    known = [x for x in stretches if x is not None]
    busy = sum(1 for x in known if x > threshold)
    mean = sum(known) / len(known) if known else None
    quiet = (before is None or before <= threshold) and busy == 0 and (mean is None or mean <= threshold / 2)
    return {"cores": cores(), "method": "proc-stat" if exact() else "loadavg (approximate)",
            "threshold_cores": threshold,
            "other_cores_before": None if before is None else round(before, 3),
            "other_cores_mean": None if mean is None else round(mean, 3),
            "other_cores_max": round(max(known), 3) if known else None,
            "busy_stretches": busy, "stretches": len(stretches), "quiet": quiet}


def warning(load: dict) -> str | None:
    """A loud one-paragraph warning when the run was not quiet, else None."""
    if load.get("quiet", True):
        return None
    parts = []
    if load.get("other_cores_before") is not None and load["other_cores_before"] > load["threshold_cores"]:
        parts.append(f"{load['other_cores_before']:.2f} cores busy with other work before the run")
    if load.get("busy_stretches"):
        parts.append(f"{load['busy_stretches']} of {load['stretches']} timed runs ran beside other work "
                     f"(up to {load['other_cores_max']:.2f} of {load['cores']} cores)")
    elif load.get("other_cores_mean") is not None:
        parts.append(f"other work took {load['other_cores_mean']:.2f} of {load['cores']} cores on average")
    return ("WARNING: THE MACHINE WAS BUSY: " + "; ".join(parts)
            + ". Timings and speedups of this run are not evidence; re-run on a quiet machine.")
