"""Where one pass goes (eagle_core/bench/pass_split.py): every product and every attention call of a pass is timed
once, the parts add up to the pass, nothing of the timing stays on the model afterwards; llama.cpp's split is read
from llama-bench's two depths; the report and the Paper lab's stacked bars draw it."""
from __future__ import annotations

import pytest
import torch

from eagle_core.bench import pass_split as ps


def test_the_split_times_every_product_and_attention_call_once(tiny_target):
    """A 2-layer target: 7 products a layer (q, k, v, o, gate, up, down) and the LM head; one attention call a
    layer (the layer body's attend: rotary, cache append, attention). A product or attention call missed, or one
    counted twice (a kernel call inside a planned layer's forward), changes the counts; the parts add up to the
    pass; the C++ body, where built, still runs its own attention under the timers (wrapping the registered
    attention function instead sent it to the Python body's)."""
    from eagle_core.model import layer_body
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    t = tiny_target
    layers = t.model.config.num_hidden_layers
    local_before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    split = ps.pass_split(t, rows=(1, 4), prefix=16, reps=2)
    assert split["rows"] == [1, 4] and split["numerics"] == t.numerics
    for r in (1, 4):
        assert split["calls"][r] == {"products": 7 * layers + 1, "attention": layers}, split["calls"][r]
        ms = split["ms"][r]
        assert ms["products"] > 0 and ms["attention"] > 0 and ms["rest"] >= 0 and ms["python"] >= 0
        parts = ms["products"] + ms["attention"] + ms["rest"] + ms["python"]
        assert parts == pytest.approx(ms["whole"], abs=0.01) or parts < ms["whole"]   # clamped, never more
        assert 0 <= split["rest_share_profiled"][r] <= 1
    # the timers are gone: no instance forward left on a module, the attention mapping as it was
    assert not [m for m in t.model.modules() if "forward" in vars(m)]
    assert dict(ALL_ATTENTION_FUNCTIONS._local_mapping) == local_before
    assert "attend" not in vars(layer_body.PYTHON)
    native = layer_body.native() if layer_body.enabled() else None
    if native is not None:              # the C++ body's own attention ran inside the timed attend
        assert "attend" not in vars(native)
        seen = []
        orig = native.mod

        class Spy:
            def __getattr__(self, name):
                if name == "attend":
                    seen.append(name)
                return getattr(orig, name)
        native.mod = Spy()
        try:
            ps.pass_split(t, rows=(4,), prefix=16, reps=1)
        finally:
            native.mod = orig
        assert seen, "the C++ body's attend did not run under the split's timers"
    with torch.inference_mode():     # and the model still computes what it did
        lg, _ = t.forward(torch.tensor([[5, 6, 7]]))
    assert torch.isfinite(lg).all()


def test_split_rows_are_one_token_and_the_fitted_tree(tiny_target):
    from eagle_core.bench.methods import method_config
    from eagle_core.decoding.engine import default_config
    base = default_config("cpu")
    nodes = method_config("eagle-static", base, 1, 0.0, 1.0, 0).spec().max_nodes
    assert ps.split_rows(["vanilla"], base) == (1, nodes) and nodes > 1


def test_llamacpps_split_is_its_pass_at_two_depths(monkeypatch):
    """Attention over the cache = the pass after the prefix less the same pass after none; the rest is not split."""
    import eagle_core.llamacpp as lc
    seen = []

    def fake(model, rows, depth, reps=5, n_threads=None, timeout=600):
        seen.append(depth)
        return {r: (9.0 + r if depth else 7.5 + r) for r in rows}, ["llama-bench", "-d", str(depth)]
    monkeypatch.setattr(lc, "bench_passes", fake)
    out = ps.llamacpp_pass_split("t.gguf", {"rows": [1, 6], "prefix": 256})
    assert sorted(seen) == [0, 256]
    assert out["ms"][1] == {"whole": 10.0, "attention": 1.5, "not_split": 8.5}
    assert out["ms"][6]["whole"] == 15.0 and out["ms"][6]["attention"] == 1.5


def fake_report():
    return {"pass_split": {"prefix": 256, "rows": [1, 6], "numerics": "gguf-blocks",
                           "ms": {"1": {"whole": 15.8, "products": 5.5, "attention": 2.0, "rest": 6.0, "python": 2.3},
                                  "6": {"whole": 24.0, "products": 10.0, "attention": 3.0, "rest": 8.0,
                                        "python": 3.0}}},
            "llamacpp_pass_split": {"prefix": 256, "rows": [1, 6],
                                    "ms": {"1": {"whole": 9.0, "attention": 1.0, "not_split": 8.0},
                                           "6": {"whole": 18.0, "attention": 1.5, "not_split": 16.5}}}}


def test_the_report_and_the_lab_draw_the_split():
    """The report's lines, the table and the stacked bars: one bar per engine and pass size, each bar's parts
    summing to its pass; llama.cpp's products and rest one part."""
    import views.lab as vl
    rep = fake_report()
    lines = ps.format_pass_split(rep["pass_split"], rep["llamacpp_pass_split"])
    assert any("ours (gguf-blocks), 1 token" in ln and "products   5.50 ( 35%)" in ln for ln in lines), lines
    assert any("llama.cpp, 6 tokens" in ln and "not_split  16.50" in ln for ln in lines), lines
    fig = vl.split_figure(rep)
    assert fig.layout.barmode == "stack"
    bars = {tr.name: list(tr.x) for tr in fig.data}
    labels = list(fig.data[0].y)
    assert labels == ["ours (Q4_1 blocks), 1 token", "ours (Q4_1 blocks), 6 tokens", "llama.cpp (Q4_1), 1 token",
                      "llama.cpp (Q4_1), 6 tokens"]
    for i, (eng, r) in enumerate([("pass_split", "1"), ("pass_split", "6"), ("llamacpp_pass_split", "1"),
                                  ("llamacpp_pass_split", "6")]):
        assert sum(x[i] for x in bars.values()) == pytest.approx(rep[eng]["ms"][r]["whole"])
    table = vl.split_table(rep)
    assert "| ours (Q4_1 blocks), 1 token | 15.8 | 5.5 (35%)" in table
    finding = vl.split_finding(rep)
    assert "15.8 ms: 5.5 ms of products" in finding and "ours takes 1.76x that" in finding


def test_the_lab_panel_draws_the_split_only_where_measured():
    """Panel 9: the split under the engines' figure where the report has one; llama.cpp's n-gram methods are rows
    of its table and the sentence names llama.cpp's fastest method where it is not plain decoding."""
    from tabs.lab import engines_section
    rep = dict(fake_report(), methods={"vanilla": {"tokens_per_s": 40.0, "tau": 1.0},
                                        "llamacpp": {"tokens_per_s": 90.0, "tau": 1.0},
                                        "llamacpp-ngram-mod": {"tokens_per_s": 120.0, "tau": 1.6}}, config={})
    sec = engines_section(rep)
    assert "| llama.cpp, ngram-mod | llama.cpp | 120.0 | 1.60 |" in sec["md"]
    assert "0.33x llama.cpp's fastest method (llama.cpp, ngram-mod, 120 tok/s)" in sec["md"]
    assert sec["split"] is not None and "Where one pass goes" in sec["split"].layout.title.text
    assert "llama-bench" in sec["split_md"]
    old = {k: v for k, v in rep.items() if k not in ("pass_split", "llamacpp_pass_split")}
    assert engines_section(old)["split"] is None


def test_a_q4_layer_run_as_one_call_is_split_a_segment_a_call(real_tokenizer, tmp_path):
    """On the q4 plan a step's layers run as one C++ call each (layer_body.q4_layer), where no timer reaches: the
    split is taken from the same pass run a segment a call (every product and attention call timed, stacked q/k/v
    and gate/up one product each), and the pass as it runs by default is timed beside it (one_call)."""
    from conftest import quantize_to_gguf, tiny_llama
    from eagle_core.model import layer_body
    from eagle_core.model.target import load_target
    if layer_body.native() is None:
        pytest.skip(layer_body.why_unavailable())
    model = tiny_llama(vocab_size=1000, hidden=128, layers=2, seed=5)
    gguf = quantize_to_gguf(model, str(tmp_path / "t.gguf"))
    t = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels="q4", gguf_file=gguf)
    assert t.numerics == "gguf-blocks"
    split = ps.pass_split(t, rows=(1,), prefix=16, reps=2)
    ms = split["ms"][1]
    assert split["calls"][1] == {"products": 4 * 2 + 1, "attention": 2}, split["calls"][1]
    assert ms["one_call"] > 0 and ms["products"] > 0 and ms["attention"] > 0
    assert any("every layer in one C++ call" in line for line in ps.format_pass_split(split))
