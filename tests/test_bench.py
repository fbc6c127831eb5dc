"""The benchmark: metric arithmetic on synthetic records, a tiny-model run of every method, CLI errors."""
from __future__ import annotations

import json

import pytest

from eagle_core.bench import methods
from eagle_core.bench import metrics
from eagle_core.bench import prompts
from eagle_core.bench import report
from eagle_core.bench import cli
from eagle_core.bench import run
from eagle_core.bench import summary
from eagle_core.bench.errors import BenchError
from eagle_core.decoding import divergence
from eagle_core.bench import machine_load
from eagle_core.model.head import random_head


def rec(prompt, tokens, seconds, forwards=None, category="all", depth_counts=None, diverged_at=None, tie=False):
    return {"prompt": prompt, "new_tokens": tokens, "seconds": seconds, "forwards": forwards,
            "category": category, "depth_counts": depth_counts, "diverged_at": diverged_at, "tie": tie}


# ------------------------------------------------------------------------------ metric arithmetic
def test_speedup_is_mean_of_per_prompt_ratios():
    base = [rec(0, 10, 1.0), rec(1, 10, 10.0)]          # 10 tok/s and 1 tok/s
    meth = [rec(0, 20, 1.0), rec(1, 10, 2.0)]           # 20 tok/s (2x) and 5 tok/s (5x)
    assert metrics.speedup(meth, base) == pytest.approx(3.5)
    # the ratio of mean speeds would be 12.5 / 5.5: a different number
    assert metrics.speedup_ratio_of_means(meth, base) == pytest.approx(12.5 / 5.5)
    assert metrics.mean_tokens_per_s(meth) == pytest.approx(12.5)
    assert metrics.speedup(base, base) == pytest.approx(1.0)
    # matched by prompt index, not by list position
    assert metrics.speedup(list(reversed(meth)), base) == pytest.approx(3.5)


def test_tau_sums_tokens_over_forwards():
    rs = [rec(0, 30, 1.0, forwards=10), rec(1, 10, 1.0, forwards=10)]
    assert metrics.tau(rs) == pytest.approx(2.0)          # 40 / 20, not the mean of 3 and 1 ... which is also 2
    rs = [rec(0, 30, 1.0, forwards=10), rec(1, 10, 1.0, forwards=5)]
    assert metrics.tau(rs) == pytest.approx(40 / 15)
    assert metrics.tau([rec(0, 5, 1.0, forwards=None)]) is None
    assert metrics.tau([]) is None


def test_depth_counts_and_acceptance():
    # chain of depth 3; accept lengths 0, 1, 3, 2
    reached, accepted = metrics.depth_counts([(0, 3), (1, 3), (3, 3), (2, 3)])
    assert reached == [4, 3, 2]
    assert accepted == [3, 2, 1]
    r = [rec(0, 1, 1.0, depth_counts=(reached, accepted)), rec(1, 1, 1.0, depth_counts=([2, 1, 0], [1, 0, 0]))]
    alpha = metrics.acceptance_by_depth(r)
    assert alpha == pytest.approx([4 / 6, 2 / 4, 1 / 2])
    # a cycle with a shallower tree (context end) does not count at depths it cannot reach
    reached, accepted = metrics.depth_counts([(1, 1), (2, 3)])
    assert reached == [2, 1, 1] and accepted == [2, 1, 0]
    assert metrics.acceptance_by_depth([rec(0, 1, 1.0)]) is None
    assert metrics.acceptance_by_depth([rec(0, 1, 1.0, depth_counts=([0], [0]))]) == [None]


def test_divergence_and_mismatch_counting():
    assert divergence.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert divergence.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert divergence.first_divergence([1, 2], [1, 2, 3]) == 2
    rs = [rec(0, 1, 1.0), rec(1, 1, 1.0, diverged_at=4), rec(2, 1, 1.0, diverged_at=0, tie=True),
          rec(3, 1, 1.0, diverged_at=7)]
    assert summary.count_mismatches(rs) == (2, 1)


def test_summarize_by_category():
    per = {"hf-greedy": [rec(0, 10, 1.0, 10, "a"), rec(1, 10, 2.0, 10, "b")],
           "eagle-chain": [rec(0, 10, 0.5, 4, "a", ([2], [1])), rec(1, 10, 0.5, 5, "b", ([2], [2]), diverged_at=3)]}
    s = summary.summarize_all(per, greedy=True)
    assert s["hf-greedy"]["speedup"] == pytest.approx(1.0)
    assert s["hf-greedy"]["tau"] == pytest.approx(1.0)
    c = s["eagle-chain"]
    assert c["speedup"] == pytest.approx((2 + 4) / 2)
    assert c["tau"] == pytest.approx(20 / 9)
    assert c["mismatches"] == 1 and c["tie_divergences"] == 0 and c["n_prompts"] == 2
    assert c["accept_rate_by_depth"] == pytest.approx([3 / 4])
    assert c["by_category"]["a"]["speedup"] == pytest.approx(2.0)
    assert c["by_category"]["b"]["speedup"] == pytest.approx(4.0)
    assert c["by_category"]["b"]["mismatches"] == 1
    s = summary.summarize_all(per, greedy=False)
    assert s["eagle-chain"]["mismatches"] is None


def test_parse_methods_and_rotation():
    assert methods.parse_methods("vanilla, eagle-static:unshifted,vanilla") == ["vanilla", "eagle-static:unshifted"]
    assert methods.parse_methods("eagle-dynamic:eagle3") == ["eagle-dynamic:eagle3"]
    assert methods.method_head_shift("eagle-dynamic:eagle3") == "eagle3"
    with pytest.raises(BenchError):
        methods.parse_methods("vanilla:eagle3")
    for bad in ("nope", "hf-greedy:unshifted", "eagle-chain:shifty", ""):
        with pytest.raises(BenchError):
            methods.parse_methods(bad)
    ms = ["a", "b", "c"]
    orders = [methods.rotated(ms, i) for i in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    for m in ms:   # every method at every position once
        assert sorted(o.index(m) for o in orders) == [0, 1, 2]


def test_read_prompt_file(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text(json.dumps({"question_id": 1, "category": "math", "turns": ["one", "two"]}) + "\n\n"
                 + json.dumps({"prompt": "hello"}) + "\n")
    items = prompts.read_prompt_file(str(p))
    assert items == [{"id": "1", "prompt": "one", "category": "math"},
                     {"id": "1", "prompt": "hello", "category": "all"}]


# ------------------------------------------------------------------------------ tiny-model run
ALL_METHODS = list(methods.DEFAULT_METHODS) + ["eagle-chain:unshifted", "eagle-static:unshifted",
                                            "eagle-dynamic:unshifted"]


@pytest.fixture(scope="module")
def tiny_report(tiny_target, tiny_random_head, tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    p = d / "prompts.jsonl"
    p.write_text(json.dumps({"question_id": 1, "category": "writing", "turns": ["Write a haiku about the sea."]})
                 + "\n" + json.dumps({"question_id": 2, "category": "math", "turns": ["What is 2 + 2?"]}) + "\n")
    heads = {"shifted": tiny_random_head, "unshifted": random_head(tiny_target, "unshifted", seed=1)}
    from eagle_core.decoding.engine import DecodeConfig
    base = DecodeConfig(draft="static", tree="cpu-8", depth=3, top_k=4, total_tokens=8)
    return run.run_bench(tiny_target, prompts.load_prompts(str(p)), ALL_METHODS, heads, base_cfg=base,
                         max_new_tokens=8, temperature=0.0, progress=False, prompt_lookup=3,
                         warmup=False)


def test_tiny_run_every_method(tiny_report):
    r = tiny_report
    assert set(r) >= {"device", "config", "methods", "load"}
    assert set(r["load"]) >= {"other_cores_before", "other_cores_mean", "busy_stretches", "quiet"}
    assert r["load"]["stretches"] == len(ALL_METHODS) * 2        # every timed run was watched
    assert all("other_cores" in x for rs in r["per_prompt"].values() for x in rs)
    assert r["device"].startswith("cpu: ") and "threads" in r["device"] and "torch" in r["device"]
    cfg = r["config"]
    for k in ("date", "max_new_tokens", "temperature", "tree", "heads"):
        assert k in cfg
    assert cfg["max_new_tokens"] == 8 and cfg["temperature"] == 0.0
    assert set(cfg["heads"]) == {"shifted", "unshifted"}
    assert list(r["methods"]) == ALL_METHODS
    for m, s in r["methods"].items():
        for k in ("tau", "tokens_per_s", "speedup", "mismatches", "tie_divergences", "n_prompts", "by_category",
                  "speedup_ci95", "speedup_min", "speedup_max", "busy_runs"):
            assert k in s, (m, k)
        lo, hi = s["speedup_ci95"]                               # two prompts: an interval around the mean
        assert s["speedup_min"] <= lo <= s["speedup"] <= hi <= s["speedup_max"]
        assert s["n_prompts"] == 2
        assert s["mismatches"] == 0, m
        assert s["tokens_per_s"] > 0 and s["speedup"] > 0
        assert set(s["by_category"]) == {"writing", "math"}
        assert s["by_category"]["math"]["n_prompts"] == 1
    assert r["methods"]["hf-greedy"]["tau"] == pytest.approx(1.0)
    assert r["methods"]["hf-greedy"]["speedup"] == pytest.approx(1.0)
    assert r["methods"]["vanilla"]["tau"] == pytest.approx(1.0)
    assert r["methods"]["hf-prompt-lookup"]["tau"] is not None
    for m in ("eagle-chain", "eagle-static:unshifted", "eagle-dynamic"):
        assert r["methods"][m]["tau"] >= 1.0
        assert r["methods"][m]["accept_rate_by_depth"] is not None
    assert len(r["methods"]["eagle-chain"]["accept_rate_by_depth"]) == 3
    hist = r["methods"]["eagle-static"]["accept_length_counts"]
    assert hist and sum(hist) > 0 and r["methods"]["hf-greedy"]["accept_length_counts"] is None
    assert r["methods"]["vanilla"]["accept_length_counts"] is None
    ts = r["methods"]["eagle-static"]["time_split"]
    assert set(ts) == {"draft_s", "verify_s", "other_s", "outside_s"} and ts["verify_s"] > 0
    assert r["methods"]["hf-greedy"]["time_split"] is None
    json.dumps(r)   # JSON-serialisable as is


def test_table_and_plot(tiny_report, tmp_path):
    quiet = dict(tiny_report, load=machine_load.summarize(0.0, [0.0, 0.02, 0.0]))   # as if run on a quiet machine
    text = report.format_table(quiet)
    assert "tau" in text and "eagle-static:unshifted" in text and "mismatch" in text and "draft" in text
    assert "95% CI" in text and "machine load:" in text
    counts = tiny_report["methods"]["eagle-static"]["accept_length_counts"]
    assert "per-position histogram" in text and f"({sum(counts)} cycles)" in text
    busy = dict(tiny_report, load=machine_load.summarize(0.0, [0.0, 1.3, 0.0]))
    busy_text = report.format_table(busy)
    assert busy_text.count("THE MACHINE WAS BUSY") == 2                # above the table and below it
    assert "machine load: BUSY" in busy_text and "THE MACHINE WAS BUSY" not in text
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench.png"
    report.write_plot(tiny_report, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sampling_run_has_no_mismatch_counts(tiny_target, tiny_random_head):
    one = [{"id": "a", "prompt": "Hi there", "category": "x"}]
    r = run.run_bench(tiny_target, one, ["hf-greedy", "vanilla", "eagle-chain"], {"shifted": tiny_random_head},
                      max_new_tokens=4, temperature=0.8, top_p=0.9, progress=False, warmup=True)
    assert r["methods"]["vanilla"]["mismatches"] is None
    assert r["methods"]["eagle-chain"]["n_prompts"] == 1


# ------------------------------------------------------------------------------ CLI errors
@pytest.mark.parametrize("args, msg", [
    (["--prompts", "/nonexistent/q.jsonl"], "not found"),
    (["--prompts", "EMPTY"], "no prompts"),
    (["--prompts", "GOOD", "--methods", "vanilla,warp-drive"], "unknown method"),
    (["--prompts", "BADJSON"], "not JSON"),
    (["--prompts", "GOOD", "--max-new-tokens", "0"], "max-new-tokens"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, args, msg):
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "good.jsonl").write_text(json.dumps({"turns": ["hi"]}) + "\n")
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    sub = {"EMPTY": str(tmp_path / "empty.jsonl"), "GOOD": str(tmp_path / "good.jsonl"),
           "BADJSON": str(tmp_path / "bad.jsonl")}
    rc = cli.main([sub.get(a, a) for a in args])
    err = capsys.readouterr().err
    assert rc != 0
    assert err.startswith("error: ") and msg in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("eps, field", [(1e-4, "mismatches"), (1e9, "tie_divergences")])
def test_divergence_is_detected_and_ties_told_apart(tiny_target, monkeypatch, eps, field):
    """Tamper with hf-greedy's last token: vanilla then diverges there; a huge tie eps makes it a 'tie'."""
    real = methods.run_hf

    def tampered(*a, **kw):
        r = real(*a, **kw)
        r["token_ids"] = r["token_ids"][:-1] + [(r["token_ids"][-1] + 1) % 1000]
        return r

    monkeypatch.setattr(methods, "run_hf", tampered)
    one = [{"id": "a", "prompt": "Hi there", "category": "x"}]
    r = run.run_bench(tiny_target, one, ["hf-greedy", "vanilla"], {}, max_new_tokens=4, progress=False,
                      warmup=False, tie_eps=eps)
    v = r["methods"]["vanilla"]
    assert v[field] == 1 and v["mismatches"] + v["tie_divergences"] == 1
    assert r["per_prompt"]["vanilla"][0]["diverged_at"] == 3
    assert r["methods"]["hf-greedy"]["mismatches"] == 0


def test_cli_unknown_tree_fails_before_loading(capsys):
    rc = cli.main(["--prompts", "humaneval", "--limit", "1", "--tree", "nope"])
    err = capsys.readouterr().err
    assert rc != 0 and err.startswith("error: unknown tree preset")


# ------------------------------------------------------------------------------ the vLLM methods' plumbing
def test_vllm_counters_become_depth_counts_and_lengths():
    """vLLM counts accepted drafts per position; the benchmark's depth counts and accepted-length histogram
    from them equal what per-draft accepted lengths give (the same drafts, counted both ways)."""
    lengths = [0, 1, 2, 2, 1, 0, 2]
    c = {"num_drafts": len(lengths), "accepted_per_pos": [sum(n >= 1 for n in lengths), sum(n >= 2 for n in lengths)]}
    assert methods.counters_depth_counts(c) == metrics.depth_counts([(n, 2) for n in lengths])
    assert sorted(methods.counters_accept_lengths(c)) == sorted(lengths)


class FakeVllmWorker:
    """Stands in for bench/vllm.py's VllmWorker: decodes with our vanilla engine (so its tokens are greedy's)
    and names a spinning process as its own, the way vLLM's engine processes are."""

    def __init__(self, target, eagle, spin_pid):
        self.target, self.eagle, self.spin_pid, self.calls = target, eagle, spin_pid, []

    def generate(self, prompt_ids, max_tokens, temperature=0.0, top_p=1.0, seed=0, stop_token_ids=None):
        import time
        from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
        self.calls.append(list(stop_token_ids or []))
        t0 = time.perf_counter()
        dec = EagleDecoder(self.target, None, DecodeConfig(draft="vanilla", max_new_tokens=max_tokens), prompt_ids)
        while not dec.done:
            dec.step()
        time.sleep(0.3)     # a stretch long enough to measure the spinning process beside it
        ans = {"new_ids": list(dec.new_ids), "seconds": time.perf_counter() - t0, "finish_reason": "length"}
        if self.eagle:
            ans["counters"] = {"num_drafts": 3, "num_draft_tokens": 6, "num_accepted_tokens": 3,
                               "accepted_per_pos": [2, 1]}
        return ans

    def own_pids(self):
        return [self.spin_pid]


def test_vllm_methods_need_their_worker(tiny_target):
    one = [{"id": "a", "prompt": "Hi there", "category": "x"}]
    with pytest.raises(BenchError, match="vLLM worker"):
        run.run_bench(tiny_target, one, ["vanilla", "vllm"], {}, max_new_tokens=4, progress=False, warmup=False)
    assert "vllm" in methods.parse_methods("vllm,vllm-eagle") and "vllm" not in methods.DEFAULT_METHODS


@pytest.mark.serial   # it measures other work on the machine
def test_vllm_methods_run_in_the_benchmark_and_their_processes_count_as_their_own(tiny_target, tiny_random_head):
    """The vllm / vllm-eagle methods go through their workers with the target's stop tokens; vLLM's counters
    become tau and acceptance; and the CPU time of a worker's processes is the method's own while it runs (a
    spinning 'engine' does not make its run busy; test_machine_load.py shows the same process counted as other
    work when not named)."""
    import subprocess
    import sys
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        engines = {"vllm": FakeVllmWorker(tiny_target, False, spin.pid),
                   "vllm-eagle": FakeVllmWorker(tiny_target, True, spin.pid)}
        one = [{"id": "a", "prompt": "Hi there", "category": "x"}]
        r = run.run_bench(tiny_target, one, ["hf-greedy", "vanilla", "vllm", "vllm-eagle"],
                          {"shifted": tiny_random_head}, max_new_tokens=6, progress=False, warmup=False,
                          engines=engines)
    finally:
        spin.kill()
        spin.wait()
    ms, pp = r["methods"], r["per_prompt"]
    assert ms["vllm"]["mismatches"] == 0 and ms["vllm-eagle"]["mismatches"] == 0
    assert engines["vllm"].calls == [list(tiny_target.stop_token_ids)]
    assert ms["vllm"]["tau"] == pytest.approx(1.0)
    assert ms["vllm-eagle"]["target_forwards"] == 1 + 3                  # the prefill + one pass per draft
    assert ms["vllm-eagle"]["accept_rate_by_depth"] == [pytest.approx(2 / 3), pytest.approx(1 / 2)]
    assert ms["vllm-eagle"]["accept_length_counts"] == [1, 1, 1]
    assert pp["vllm"][0]["other_cores"] < 0.4, pp                          # the spinner was its own work


def test_cli_vllm_methods_without_vllm_fail_before_loading(monkeypatch, capsys):
    monkeypatch.setenv("EAGLE_LENS_VLLM_PYTHON", "/nonexistent/python")
    monkeypatch.setattr("eagle_core.model.target.load_target", lambda *a, **k: pytest.fail("loaded a model"))
    rc = cli.main(["--prompts", "humaneval", "--limit", "1", "--methods", "hf-greedy,vllm"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: the vllm methods need vLLM") and "setup_vllm.sh" in err
    rc = cli.main(["--prompts", "humaneval", "--limit", "1", "--methods", "vllm-eagle", "--vllm-k", "0"])
    assert rc == 2 and "--vllm-k must be in 1..8" in capsys.readouterr().err


# ------------------------------------------------------------------------------ numerical models
def test_pass_costs_are_in_the_report(tiny_report):
    pc = tiny_report["pass_costs"]
    assert pc["rows"] == [1, 2, 4, 8, 16, 26] and pc["steps"][0] == 1.0
    assert len(pc["plan_ms"]) == len(pc["stock_ms"]) == 6 and all(m > 0 for m in pc["plan_ms"] + pc["stock_ms"])
    assert pc["numerics"] == "float32"          # tiny targets run fp32 (conftest)
    text = report.format_table(tiny_report)
    assert "target pass cost by tokens per pass" in text and "stock transformers (fp32)" in text
    assert "llama.cpp" not in text
    # a run with llama.cpp's methods carries its pass costs too (llama-bench's means; a row it lacks is a dash)
    lc = {"ms": {"1": 9.5, "2": 12.0, "4": 20.25}, "relative": {"1": 1.0, "2": 1.2632, "4": 2.1316}}
    text = report.format_table(dict(tiny_report, llamacpp_pass_costs=lc))
    line = next(t for t in text.splitlines() if "llama.cpp (its GGUF" in t).split()
    assert line[-6:] == ["9.5", "12.0", "20.2", "-", "-", "-"]
    line = next(t for t in text.splitlines() if "llama.cpp, in its passes" in t).split()
    assert line[-6:] == ["1.00", "1.26", "2.13", "-", "-", "-"]


def test_mismatch_references_follow_the_numerical_model():
    pp = dict.fromkeys(["hf-greedy", "vanilla", "hf-prompt-lookup", "eagle-static", "vllm-eagle"], [])
    same = run.mismatch_references(pp, "float32")
    assert same == {"vanilla": "hf-greedy", "hf-prompt-lookup": "hf-greedy", "eagle-static": "hf-greedy",
                    "vllm-eagle": "hf-greedy"}
    bf16 = run.mismatch_references(pp, "bf16-linear")
    # ours against plain decoding with the same kernels; vanilla itself goes to the numerics report instead
    assert bf16 == {"hf-prompt-lookup": "hf-greedy", "eagle-static": "vanilla", "vllm-eagle": "hf-greedy"}
    no_vanilla = run.mismatch_references({"hf-greedy": [], "eagle-chain": []}, "bf16-linear")
    assert no_vanilla == {"eagle-chain": "hf-greedy"}


def test_bf16_run_checks_eagle_against_vanilla_and_reports_where_fp32_parts(real_tokenizer, monkeypatch):
    from conftest import skip_without_bf16, tiny_llama
    from eagle_core.decoding.engine import DecodeConfig
    from eagle_core.model.target import load_target
    skip_without_bf16()
    target = load_target(model=tiny_llama(seed=9), tokenizer=real_tokenizer, device="cpu", kernels="bf16")
    assert target.numerics == "bf16-linear"
    head = random_head(target, "shifted", seed=2)
    one = [{"id": "a", "prompt": "Hi there", "category": "x"}, {"id": "b", "prompt": "Tell me", "category": "x"}]
    real = methods.run_hf

    def tampered(*a, **k):   # hf-greedy's 3rd token differs on the first prompt: the fp32 model "parts"
        r = real(*a, **k)
        if a[1] == target.render_prompt("Hi there"):
            r["token_ids"][2] = (r["token_ids"][2] + 1) % 1000
        return r
    monkeypatch.setattr(methods, "run_hf", tampered)
    r = run.run_bench(target, one, ["hf-greedy", "vanilla", "eagle-chain"], {"shifted": head},
                      base_cfg=DecodeConfig(draft="static", tree="cpu-4", depth=3), max_new_tokens=6,
                      progress=False, warmup=False, pass_costs=False)
    assert r["config"]["numerics"] == "bf16-linear" and r["config"]["tie_eps"] == 0.05
    assert r["config"]["mismatch_references"] == {"eagle-chain": "vanilla"}
    assert r["methods"]["eagle-chain"]["mismatches"] == 0          # against vanilla: the same function
    nr = r["numerics"]
    assert nr["parted"] == 1 and nr["prompts"] == 2 and nr["divergences"][0]["index"] == 2
    assert nr["divergences"][0]["fp32_margin"] >= 0
    text = report.format_table(r)
    assert "parts from vanilla on 1 of 2 prompts" in text and "fp32 margin" in text
    assert r["pass_costs"] is None


def test_eagle3_methods_draft_with_the_eagle3_head(tiny_target, tmp_path):
    """`eagle-*:eagle3` runs the EAGLE-3 head (model/head3.py) beside the others in one run, exactly."""
    from eagle_core.decoding.engine import DecodeConfig
    from eagle_core.model.head3 import random_eagle3_head
    p = tmp_path / "prompts.jsonl"
    p.write_text(json.dumps({"question_id": 1, "turns": ["Write a haiku about the sea."]}) + "\n")
    head3 = random_eagle3_head(tiny_target, None, seed=2)
    got = run.run_bench(tiny_target, prompts.load_prompts(str(p)), ["vanilla", "eagle-chain:eagle3"],
                        {"eagle3": head3}, base_cfg=DecodeConfig(draft="chain", depth=3), max_new_tokens=6,
                        temperature=0.0, progress=False, warmup=False)
    assert got["methods"]["eagle-chain:eagle3"]["mismatches"] == 0
    assert got["config"]["heads"] == {"eagle3": "random:eagle3"}
    with pytest.raises(BenchError, match="eagle3"):
        run.run_bench(tiny_target, prompts.load_prompts(str(p)), ["eagle-chain:eagle3"], {},
                      max_new_tokens=6, progress=False, warmup=False)
