"""The benchmark's guard against a busy machine: the arithmetic, and that real competing work is seen."""
import subprocess
import sys
import time

import pytest

from eagle_core.bench import metrics
from eagle_core.bench import cli
from eagle_core.bench import preflight
from eagle_core.bench import machine_load
from eagle_core.bench.machine_load import Sample


def test_other_cores_is_machine_busy_minus_own_plus_steal():
    a = Sample(wall=10.0, own_cpu=5.0, stat=(100.0, 1.0), loadavg=None)
    b = Sample(wall=12.0, own_cpu=8.0, stat=(105.0, 1.5), loadavg=None)
    # 5 s busy on the machine, 3 of them ours, 0.5 stolen, over 2 s of wall time
    assert machine_load.other_cores(a, b) == pytest.approx((5 - 3 + 0.5) / 2)
    quiet = Sample(wall=12.0, own_cpu=8.5, stat=(103.0, 1.0), loadavg=None)
    assert machine_load.other_cores(a, quiet) == 0.0            # never negative (clock granularity)
    assert machine_load.other_cores(b, a) is None                # no time passed


def test_loadavg_fallback_where_proc_stat_is_missing():
    a = Sample(wall=0.0, own_cpu=0.0, stat=None, loadavg=None)
    b = Sample(wall=1.0, own_cpu=1.0, stat=None, loadavg=2.5)
    assert machine_load.other_cores(a, b) == pytest.approx(1.5)


def test_summary_verdict_and_warning():
    quiet = machine_load.summarize(0.02, [0.0, 0.05, 0.01])
    assert quiet["quiet"] and machine_load.warning(quiet) is None
    busy_run = machine_load.summarize(0.02, [0.0, 0.9, 0.01])
    assert not busy_run["quiet"] and busy_run["busy_stretches"] == 1 and busy_run["other_cores_max"] == 0.9
    assert "BUSY" in machine_load.warning(busy_run) and "1 of 3" in machine_load.warning(busy_run)
    busy_before = machine_load.summarize(1.2, [0.0])
    assert not busy_before["quiet"] and "before the run" in machine_load.warning(busy_before)


@pytest.mark.serial   # it measures the machine's idle cores: a parallel worker beside it is "competing" too
@pytest.mark.skipif(not machine_load.exact(), reason="needs /proc/stat")
def test_a_competing_process_is_measured():
    before = machine_load.measure_idle(0.5)
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<4: pass"])
    try:
        time.sleep(0.5)
        during = machine_load.measure_idle(1.5)
    finally:
        spin.kill()
        spin.wait()
    assert during > 0.6, (before, during)                    # one spinning process is ~one core of other work
    assert during > (before or 0.0) + 0.5


@pytest.mark.serial
@pytest.mark.skipif(not machine_load.exact(), reason="needs /proc/stat")
def test_processes_named_as_our_own_are_not_other_work():
    """A method that runs in other processes (vLLM's engine) names them: their CPU time is then the benchmark's
    own, and without the names it is other work."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        a, a_own = machine_load.sample(), machine_load.sample([spin.pid])
        time.sleep(1.5)
        b, b_own = machine_load.sample(), machine_load.sample([spin.pid])
        used = machine_load.pids_cpu_seconds([spin.pid])
    finally:
        spin.kill()
        spin.wait()
    assert used > 1.0                                             # it did spin
    assert machine_load.other_cores(a, b) > 0.6
    assert machine_load.other_cores(a_own, b_own) < 0.4
    assert machine_load.pids_cpu_seconds([spin.pid]) == 0.0        # gone: counts nothing


def test_bench_refuses_a_busy_machine_before_loading(monkeypatch, capsys):
    monkeypatch.setattr(machine_load, "measure_idle", lambda seconds=1.0: 1.4)
    loaded = []
    monkeypatch.setattr("eagle_core.model.target.load_target", lambda *a, **k: loaded.append(1))
    rc = cli.main(["--prompts", "humaneval", "--limit", "1", "--wait-quiet", "0"])
    err = capsys.readouterr().err
    assert rc == 3 and not loaded
    assert "machine is busy" in err and "1.40" in err and "--allow-busy" in err


def test_bench_waits_for_quiet(monkeypatch, capsys):
    readings = iter([0.9, 0.8, 0.05])
    monkeypatch.setattr(machine_load, "measure_idle", lambda seconds=1.0: next(readings))
    assert preflight.wait_for_quiet(60, probe_s=0) == 0.05
    assert capsys.readouterr().err.count("waiting for a quiet machine") == 2


def test_interval_of_the_mean():
    assert metrics.mean_interval([1.5]) is None
    lo, hi = metrics.mean_interval([1.5] * 10)
    assert lo == hi == pytest.approx(1.5)                    # no spread, no width
    xs = [1.2, 1.4, 1.5, 1.6, 1.8, 1.3, 1.7, 1.5, 1.4, 1.6]
    lo, hi = metrics.mean_interval(xs)
    m = sum(xs) / len(xs)
    assert lo < m < hi and hi - lo < 0.3
    assert metrics.mean_interval(xs) == [lo, hi]               # seeded: the same interval every time
    wide = metrics.mean_interval([0.5, 2.5] * 5)
    assert wide[1] - wide[0] > hi - lo                       # more spread, wider interval
