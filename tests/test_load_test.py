"""The load test (scripts/load_test.py) end to end, small: 3 students on the app with the tiny target, in-process.

Every student opens, Steps 5 times, Runs to 16 tokens, checks its tokens against plain greedy decoding of its
prompt (cross-talk), Runs a new generation and Stops it, and computes "How can I" once.
"""
import importlib.util
import json
import os

import pytest

pytest.importorskip("gradio_client")

from servers import app_in_process  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script():
    spec = importlib.util.spec_from_file_location("load_test", os.path.join(ROOT, "scripts", "load_test.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def url():
    with app_in_process("tiny") as u:
        yield u


@pytest.mark.slow
def test_three_students_no_errors_no_cross_talk(url, tmp_path, capsys):
    lt = load_script()
    out = tmp_path / "load.json"
    rc = lt.main(["--students", "3", "--url", url, "--max-new-tokens", "16", "--reference", "engine",
                  "--target", "tiny", "--json", str(out), "--timeout", "60", "--stats-every", "0.5", "--settle", "20"])
    printed = capsys.readouterr().out
    rep = json.loads(out.read_text())
    assert rep["n_errors"] == 0, rep["errors"]
    assert rep["n_cross_talk"] == 0, rep["cross_talk"]
    assert rc == 0
    assert rep["students_completed"] == 3 and not rep["prompts_where_students_disagree"]
    n = {a: s["n"] for a, s in rep["actions"].items()}
    assert n == {"open": 3, "step": 15, "step 1 (with the prefill)": 3, "steps 2-5": 12, "run": 3,
                 "run: first output": 3, "run: first text": 3, "tokens": 3, "stop": 3, "how can I": 3}, n
    for a, s in rep["actions"].items():
        assert 0 <= s["p50"] <= s["p95"] <= s["max"], (a, s)
    assert rep["memory"]["before_mb"] > 0 and rep["memory"]["max_mb"] >= rep["memory"]["before_mb"]
    assert rep["server"]["max_sessions"] >= 1 and rep["server"]["stats_samples"] >= 1
    assert "| action | n | p50 s | p95 s | max s |" in printed and "cross-talk: 0" in printed
    cpu = rep["cpu"]                                    # both sides' CPU seconds during the load
    assert cpu["client_cpu_s"] > 0 and cpu["server_cpu_s"] is not None and "CPU during the load" in printed


def test_compare_finds_the_first_difference():
    lt = load_script()
    ref = {"token_ids": [1, 2, 3, 4], "finished": "max_new_tokens"}
    assert lt.compare([1, 2, 3, 4], "max_new_tokens", ref) is None
    assert lt.compare([1, 2, 9, 4], "max_new_tokens", ref) == 2
    assert lt.compare([1, 2, 3], "max_new_tokens", ref) == 3             # shorter, and no eos: a difference
    assert lt.compare([1, 2, 3], "eos", ref) is None                     # the student's answer ended at eos
    assert lt.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
