"""The shared prompt sets on a clone without ../shared/data: found in the cache or fetched into it (a fake fetch
serves the shared file or fails as an offline machine does); never written into the repository."""
import io
import json
import os
import types

import pytest

from eagle_core.bench import prompt_sets, prompts, sets as bench_sets
from eagle_core.bench.errors import BenchError
from eagle_core.paths import REPO


def source_lines(n=120):
    return "\n".join(json.dumps({"question_id": i, "category": "c", "turns": [f"question {i}?"]}) for i in range(n))


def fake_fetch(text, calls):
    def fetch(url, timeout):
        calls.append(url)
        return io.BytesIO(text.encode())
    return fetch


def offline(url, timeout):
    raise OSError("[Errno -3] Temporary failure in name resolution")


def test_fetch_keeps_the_first_80_items_in_the_cache_and_says_so(tmp_path, capsys):
    calls = []
    path = prompt_sets.set_path("gsm8k", shared=str(tmp_path / "none"), cache=str(tmp_path / "cache"),
                                fetch=fake_fetch(source_lines(), calls))
    assert calls == [prompt_sets.SOURCES["gsm8k"]] and path == str(tmp_path / "cache" / "gsm8k_question.jsonl")
    items = prompts.read_prompt_file(path)
    assert len(items) == prompt_sets.ITEMS == 80 and items[0]["prompt"] == "question 0?" and items[-1]["id"] == "79"
    assert "fetched the gsm8k prompt set (80 items)" in capsys.readouterr().err
    # the second time it is read from the cache, not fetched
    again = prompt_sets.set_path("gsm8k", shared=str(tmp_path / "none"), cache=str(tmp_path / "cache"),
                                 fetch=fake_fetch("", calls))
    assert again == path and len(calls) == 1
    assert not os.path.commonpath([path, REPO]) == REPO   # never inside the repository


def test_the_shared_folder_comes_first(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "alpaca_question.jsonl").write_text(source_lines(3))
    got = prompt_sets.set_path("alpaca", shared=str(shared), cache=str(tmp_path / "cache"), fetch=offline)
    assert got == str(shared / "alpaca_question.jsonl")


def test_offline_and_unknown_sets_are_one_clear_message(tmp_path):
    with pytest.raises(BenchError, match=r"fetching https://raw.githubusercontent.com/lm-sys/FastChat.*failed.*"
                                         r"--prompts humaneval"):
        prompt_sets.set_path("mt_bench", shared=str(tmp_path), cache=str(tmp_path / "c"), fetch=offline)
    with pytest.raises(BenchError, match="unknown prompt set 'nope'"):
        prompt_sets.set_path("nope")
    with pytest.raises(BenchError, match="did not give a question set"):
        prompt_sets.set_path("alpaca", shared=str(tmp_path), cache=str(tmp_path / "c"),
                             fetch=fake_fetch("<html>not found</html>", []))


def test_a_documented_path_runs_on_a_clone_without_the_shared_folder(tmp_path, monkeypatch):
    """`--prompts ../shared/data/mt_bench_question.jsonl` (the docs' commands) where that folder is absent."""
    monkeypatch.setattr(prompt_sets, "CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prompt_sets, "SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.setattr(prompt_sets.urllib.request, "urlopen", fake_fetch(source_lines(), []))
    got = prompts.load_prompts(str(tmp_path / "absent" / "mt_bench_question.jsonl"), limit=5)
    assert [g["prompt"] for g in got] == [f"question {i}?" for i in range(5)]
    # a missing file that names no shared set is still the plain "not found"
    with pytest.raises(BenchError, match="not found"):
        prompts.load_prompts(str(tmp_path / "mine.jsonl"))


def test_bench_sets_without_the_shared_folder_fetches_each_set(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(bench_sets, "DATA", str(tmp_path / "absent"))
    monkeypatch.setattr(bench_sets, "set_path", lambda s: asked.append(s) or str(tmp_path / f"{s}.jsonl"))
    for s in ("gsm8k", "alpaca"):
        (tmp_path / f"{s}.jsonl").write_text(source_lines(4))
    args = types.SimpleNamespace(methods="hf-greedy,eagle-static", sets="gsm8k,alpaca", data=str(tmp_path / "absent"),
                                 limit=2, out=str(tmp_path))
    _, sets, got = bench_sets._checked_inputs(args)
    assert asked == ["gsm8k", "alpaca"] and [len(got[s]) for s in sets] == [2, 2]
    args.data = str(tmp_path / "typo")
    with pytest.raises(BenchError, match="no prompt-set folder"):
        bench_sets._checked_inputs(args)
