"""The all-sets summary: rows, the best EAGLE method, the table, the chart, and rebuilding from JSON."""
import json

import pytest

from eagle_core.bench import summary
from eagle_core.bench import sets as bench_sets
from eagle_core.bench import machine_load


def fake_report(eagle_speed: float, lookup_speed: float, busy: bool = False) -> dict:
    per = {"hf-greedy": [], "eagle-static": [], "eagle-chain": [], "hf-prompt-lookup": []}
    speeds = {"hf-greedy": 1.0, "eagle-static": eagle_speed, "eagle-chain": eagle_speed * 0.8,
              "hf-prompt-lookup": lookup_speed}
    taus = {"hf-greedy": 1.0, "eagle-static": 1.8, "eagle-chain": 2.0, "hf-prompt-lookup": 1.5}
    for i in range(4):
        for m in per:
            secs = 4.0 / (speeds[m] * (1 + 0.1 * i * (m != "hf-greedy")))   # per-prompt spread of ratios
            per[m].append({"prompt": i, "category": "c", "new_tokens": 100, "seconds": secs,
                           "forwards": round(100 / taus[m]), "diverged_at": None, "tie": False,
                           "other_cores": 0.9 if busy and i == 0 else 0.0})
    return {"device": "cpu: test, 2 threads, torch x, linear kernels timed per row count: plain below 4 rows",
            "config": {"date": "2026-12-01", "n_prompts": 4, "max_new_tokens": 100, "temperature": 0.0,
                       "command": "python -m eagle_core.bench.sets --limit 4"},
            "load": machine_load.summarize(0.0, [0.9 if busy else 0.0, 0.0]),
            "methods": summary.summarize_all(per, greedy=True)}


def test_rows_pick_the_best_eagle_and_carry_prompt_lookup():
    rep = fake_report(1.5, 1.2)
    assert bench_sets.best_eagle(rep) == "eagle-static"
    row = bench_sets.set_row("gsm8k", rep, "eagle-static")
    assert row["speedup"] == pytest.approx(1.5 * 1.15) and row["prompt_lookup_speedup"] == pytest.approx(1.2 * 1.15)
    assert row["tau"] == pytest.approx(100 / 56) and row["quiet"]
    assert row["cycle_cost"] == pytest.approx(row["tau"] / row["speedup"], rel=0.05)   # speedup ~ tau / cost
    lo, hi = row["speedup_ci95"]
    assert 1.5 <= lo < row["speedup"] < hi <= 1.5 * 1.3                  # inside the per-prompt range


def test_table_marks_a_busy_set(tmp_path):
    reports = {"gsm8k": fake_report(1.5, 1.2), "alpaca": fake_report(1.4, 1.3, busy=True)}
    text = bench_sets.format_rows([bench_sets.set_row(s, r, "eagle-static") for s, r in reports.items()])
    assert text.count("\n") == 3 and "| gsm8k | 4 | eagle-static |" in text
    assert "quiet |" in text and "BUSY |" in text
    pytest.importorskip("matplotlib")
    for s, r in reports.items():
        (tmp_path / f"sets_{s}_t0_cpu.json").write_text(json.dumps(r))
    rc = bench_sets.main(["--from-json", "--sets", "gsm8k,alpaca", "--out", str(tmp_path)])
    assert rc == 0
    assert (tmp_path / "sets_t0_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "sets_t0_cpu.md").read_text()
    assert "bench.sets --limit 4" in md and "| alpaca |" in md and "BUSY" in md


def test_missing_reports_fail_in_one_line(tmp_path, capsys):
    assert bench_sets.main(["--from-json", "--sets", "gsm8k", "--out", str(tmp_path)]) == 2
    assert "cannot read a report" in capsys.readouterr().err
