"""The GGUF block kernel (model/gguf_blocks.py): the weights it computes with are the reference dequantization of
the file's Q4_1 / Q8_0 blocks bit for bit, it is row-independent, and the "q4" plan runs it with greedy identity."""
from __future__ import annotations

import os

import gguf
import numpy as np
import pytest
import torch

from conftest import quantize_to_gguf, tiny_llama, tree_vs_steps
from eagle_core.model import cpu_kernels as K
from eagle_core.model import gguf_blocks as G
from eagle_core.model.planned_linear import rows_dependence
from eagle_core.model.target import EMBEDDED_GGUF, embedded_gguf_dir, load_target

pytestmark = pytest.mark.skipif(G.kernel() is None, reason=f"{G.why_unavailable()}")


def _reference(t) -> torch.Tensor:
    """llama.cpp's reference dequantization of a reader tensor, [rows, K] fp32."""
    return torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type)))


def _check_blocks_equal_reference(t):
    kind = G.TYPES[t.tensor_type.name]
    ref = _reference(t)
    blocks = G.Blocks(torch.from_numpy(np.array(t.data)), kind, ref.shape[1], t.name)
    assert torch.equal(blocks.weights(), ref), t.name
    # and what the matmul itself computes with: the product with the identity is the weight, transposed
    eye = torch.eye(ref.shape[1])
    assert torch.equal(blocks.linear(eye), ref.T), t.name


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    model = tiny_llama(vocab_size=256, hidden=128, layers=2, seed=4)
    path = quantize_to_gguf(model, str(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))
    return model, path


def test_synthetic_gguf_blocks_equal_reference_dequantization(tiny_gguf):
    _, path = tiny_gguf
    tensors, meta = G.read_tensors(path)
    assert meta["general.architecture"] == "llama"
    assert {t.tensor_type.name for t in tensors.values()} == {"Q4_1", "Q8_0"} and len(tensors) == 15
    for t in tensors.values():
        _check_blocks_equal_reference(t)


def test_blocks_attach_to_every_layer_in_its_row_order(tiny_gguf):
    """q/k come permuted in the file (llama.cpp's rotary layout); the attached blocks are in the model's order,
    checked against the model's own (dequantized) weights bit for bit, the tied LM head on the Q8_0 embedding."""
    model, path = tiny_gguf
    report = G.attach_blocks(model, path)
    assert report["layers"] == 15 and report["types"] == {"Q4_1": 14, "Q8_0": 1} and not report["unmatched"]
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            assert torch.equal(mod.gguf_blocks.weights(), mod.weight), name
    q = model.model.layers[0].self_attn.q_proj
    assert q.gguf_blocks.source == "blk.0.attn_q.weight"
    raw = torch.from_numpy(np.array(G.read_tensors(path)[0]["blk.0.attn_q.weight"].data))
    as_stored = G.Blocks(raw, G.Q4_1, q.in_features, "as stored").weights()
    assert not torch.equal(as_stored, q.weight)             # the file's order is not the model's: it was undone
    x = torch.randn(5, q.in_features)
    assert torch.allclose(q.gguf_blocks.linear(x), x @ q.weight.T, atol=1e-5)


def test_a_changed_weight_gets_no_blocks(tmp_path):
    model = tiny_llama(vocab_size=256, hidden=64, layers=1, seed=2)
    path = quantize_to_gguf(model, str(tmp_path / "m.gguf"))
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[3, 5] += 1e-3
    report = G.attach_blocks(model, path)
    assert report["unmatched"] == ["model.layers.0.mlp.up_proj"] and report["layers"] == 7
    assert getattr(model.model.layers[0].mlp.up_proj, "gguf_blocks", None) is None


@pytest.mark.parametrize("kind,shape", [(G.Q4_1, (96, 160)), (G.Q8_0, (40, 64))])
def test_block_kernel_is_row_independent(kind, shape):
    n, k = shape
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k)).astype(np.float32)
    qtype = gguf.GGMLQuantizationType.Q4_1 if kind == G.Q4_1 else gguf.GGMLQuantizationType.Q8_0
    blocks = G.Blocks(torch.from_numpy(gguf.quants.quantize(w, qtype)), kind, k, "random")
    assert rows_dependence(blocks.linear, k) is None
    x = torch.randn(7, k)
    torch.set_num_threads(2)
    try:
        two = blocks.linear(x)
    finally:
        torch.set_num_threads(1)
    assert torch.equal(two, blocks.linear(x))               # threads split outputs, never a sum


@pytest.mark.parametrize("kind", [G.Q4_1, G.Q8_0])
def test_block_kernel_sums_each_output_in_column_order(kind):
    """The documented sum: one fp32 accumulator per output, an fma per input column in order. With every weight 1
    and x = [1e8, 1, ..., 1, -1e8], that order keeps 1e8 (1e8 + 1 rounds back to it) until the last column takes
    it to exactly 0, on the register path (1-16 rows: tiles of up to 8 rows with AVX-512, 6 with AVX2) and the
    buffered one (more; 96 columns span two chunks);
    float64 gives 94, and lanes summed apart (the file's layout) would not give 0."""
    n, k = 40, 96
    one = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    block = np.concatenate([one, np.zeros(2, np.uint8), np.full(16, 0x11, np.uint8)]) if kind == G.Q4_1 else \
        np.concatenate([one, np.ones(32, np.uint8)])                  # Q4_1: d 1, m 0, q 1; Q8_0: d 1, q 1
    blocks = G.Blocks(torch.from_numpy(np.tile(block, (n, k // G.BLOCK))), kind, k, "ones")
    assert torch.equal(blocks.weights(), torch.ones(n, k))
    x = torch.ones(k)
    x[0], x[-1] = 1e8, -1e8
    for rows in (1, 2, 4, 5, 7, 8, 13, 17, 20):
        assert torch.equal(blocks.linear(x.repeat(rows, 1)), torch.zeros(rows, n)), rows
    assert float(x.double().sum()) == k - 2


def test_q4_plan_names_the_model(tiny_gguf, real_tokenizer):
    model, path = tiny_gguf
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels="q4", gguf_file=path)
    plan = target.kernel_plan
    assert plan["precision"] == "q4" and target.numerics == "gguf-blocks" and target.row_independent
    assert plan["gguf"]["types"] == {"Q4_1": 14, "Q8_0": 1}
    text = K.describe(plan)
    assert "GGUF block kernels" in text and "row-independent (probed)" in text, text
    layer = model.model.layers[1].mlp.down_proj
    assert layer.kernel_for(1) == K.GGUF and layer.kernel_for(26) == K.GGUF and layer.kernel_for(200) == K.PACKED
    ids = torch.tensor([[1, 50, 60, 70]])
    with torch.inference_mode():
        got, _ = target.forward(ids)
        with K.stock_kernels():
            ref, _ = target.forward(ids)
    assert torch.allclose(got, ref, atol=1e-4) and not torch.equal(got, ref)   # same weights, other sum order


def test_q4_without_a_gguf_is_refused_with_a_reason(real_tokenizer):
    target = load_target(model=tiny_llama(vocab_size=256, hidden=64, layers=1), tokenizer=real_tokenizer,
                         device="cpu", kernels="q4")
    assert target.numerics == "float32" and target.kernel_plan["q4_refused"] == "no layer has GGUF blocks"
    assert "q4 was forced but not taken: no layer has GGUF blocks" in K.describe(target.kernel_plan)


def test_choose_q4_follows_the_timings():
    fp32 = {1: 0.044, 4: 0.060, 16: 0.090}
    assert K.choose_q4(fp32, {1: 0.020, 4: 0.040, 16: 0.080})
    assert not K.choose_q4(fp32, {1: 0.050, 4: 0.030, 16: 0.040})      # one-token step slower
    assert not K.choose_q4(fp32, {1: 0.040, 4: 0.090, 16: 0.200})      # slower in sum
    assert not K.choose_q4(fp32, {1: 0.020})                           # not timed at every row count


@pytest.mark.parametrize("shape", [dict(draft="chain", depth=4), dict(draft="static", tree="cpu-12"),
                                   dict(draft="dynamic", depth=5, top_k=4, total_tokens=16)],
                         ids=lambda s: s["draft"])
def test_greedy_identity_q4(oracle_q4, shape):
    """The q4 numerical model: EAGLE equals plain greedy decoding on the same kernels, token for token, and
    plain decoding equals transformers' generate on the same planned model."""
    from test_engine import hf_greedy, prompts, run
    target, head = oracle_q4
    for ids in prompts(8, seed=12):
        ref = run(target, None, ids, draft="vanilla", max_new_tokens=32)
        assert ref.token_ids == hf_greedy(target, ids, 32)
        got = run(target, head, ids, max_new_tokens=32, **shape)
        assert got.token_ids == ref.token_ids
        assert got.tau > 2.5


def test_q4_tree_pass_equals_one_token_steps(tmp_path, real_tokenizer):
    """Row-independent block kernels and the float64 KV cache: a tree pass computes each chain node's logits
    exactly as one-token steps do (bit for bit)."""
    from eagle_core.decoding.engine import kv_cache_dtype
    model = tiny_llama(hidden=256, layers=2, seed=3)
    path = quantize_to_gguf(model, str(tmp_path / "wide.gguf"))
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels="q4", gguf_file=path)
    assert target.numerics == "gguf-blocks" and kv_cache_dtype(target) == torch.float64
    chain, sibling = tree_vs_steps(target, torch.float64)
    assert chain == [0.0] * 4
    assert sibling > 1e-2


@pytest.mark.model
def test_embedded_target_blocks_equal_reference_dequantization():
    """Every Q4_1 / Q8_0 tensor of the embedded SmolLM2 GGUF: the kernel's weights are the reference
    dequantization bit for bit (210 Q4_1 linear layers, the Q8_0 embedding that is the tied LM head)."""
    tensors, _ = G.read_tensors(f"{embedded_gguf_dir()}/{EMBEDDED_GGUF}")
    assert sorted({t.tensor_type.name for t in tensors.values()}) == ["Q4_1", "Q8_0"] and len(tensors) == 211
    for t in tensors.values():
        kind = G.TYPES[t.tensor_type.name]
        ref = _reference(t)
        blocks = G.Blocks(torch.from_numpy(np.array(t.data)), kind, ref.shape[1], t.name)
        assert torch.equal(blocks.weights(), ref), t.name
    _check_blocks_equal_reference(tensors["blk.0.ffn_down.weight"])   # and through the matmul (one: ~1 s each)


@pytest.mark.model
@pytest.mark.slow
def test_embedded_target_q4_greedy_identity(real_tokenizer):
    """The embedded target on its own blocks: every layer matched (q/k unpermuted), and EAGLE with the shipped
    head equals plain decoding on the same kernels over a few chat prompts."""
    from eagle_core.decoding.engine import DecodeConfig, generate
    from eagle_core.model.head import resolve_head
    target = load_target(kernels="q4")
    plan = target.kernel_plan
    assert plan["gguf"]["layers"] == 211 and not plan["gguf"]["unmatched"] and target.numerics == "gguf-blocks"
    assert target.row_independent
    head = resolve_head("shifted", target)
    for prompt in ("Write a haiku about the sea.", "What is the capital of France? Explain briefly.",
                   "List three uses of a paperclip."):
        ids = target.render_prompt(prompt)
        ref = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=48), ids)
        got = generate(target, head, DecodeConfig(draft="dynamic", max_new_tokens=48), ids)
        assert got.token_ids == ref.token_ids, prompt


def test_auto_plan_times_q4_where_asked(tiny_gguf, real_tokenizer, monkeypatch):
    """With Q4_IN_AUTO the automatic plan times the block kernel on whole passes beside fp32 and keeps the faster
    by choose_q4; either way the plan says what it measured."""
    import eagle_core.model.target as T
    monkeypatch.setattr(T, "Q4_IN_AUTO", True)
    model, path = tiny_gguf
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels="auto", gguf_file=path)
    plan = target.kernel_plan
    assert set(plan["q4_ms"]) == set(plan["ms"]) and plan["gguf"]["layers"] == 15
    assert plan["precision"] in ("q4", "fp32", "bf16")
    layer = model.model.layers[0].mlp.up_proj
    assert (layer.kernel_for(1) == K.GGUF) == (plan["precision"] == "q4")
    bf16 = K.choose_precision(plan["ms"]) == "bf16"   # what q4 was weighed against
    chosen = {r: t[2] if bf16 else min(t[:2]) for r, t in plan["ms"].items()}
    if abs(sum(chosen.values()) - sum(plan["q4_ms"].values())) > 0.05 * sum(chosen.values()):   # clearly apart
        assert (plan["precision"] == "q4") == K.choose_q4(chosen, plan["q4_ms"])
    # the page's banner and the reports say which model runs and why: the timing that chose it, or why not q4
    said = K.short_description(plan)
    if plan["precision"] == "q4":
        assert said.startswith("the GGUF's own 4-bit blocks (timed faster here: a one-token pass") and "q4_refused" not in plan
    else:
        assert plan["q4_refused"].startswith("timed slower here") and "4-bit blocks not taken: timed slower" in said


def test_q4_is_in_the_automatic_plan_by_default_and_a_missing_kernel_is_said(tmp_path, real_tokenizer, monkeypatch):
    """Q4_IN_AUTO is on unless EAGLE_LENS_Q4_AUTO=0; where the block kernel cannot be built (no compiler), the plan
    keeps fp32 and says why, in its description and the banner's words."""
    import eagle_core.model.target as T
    assert T.q4_in_auto({}) and T.q4_in_auto({"EAGLE_LENS_Q4_AUTO": "1"}) and not T.q4_in_auto({"EAGLE_LENS_Q4_AUTO": "0"})
    monkeypatch.setattr(T, "Q4_IN_AUTO", T.q4_in_auto({}))
    monkeypatch.setattr(G, "_built", {"mod": None, "why": "the GGUF block kernel could not be built (no c++)"})
    model = tiny_llama(vocab_size=1000, hidden=64, layers=2, seed=11)
    path = quantize_to_gguf(model, str(tmp_path / "t.gguf"))
    target = T.load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels="auto", gguf_file=path)
    plan = target.kernel_plan
    assert plan["precision"] != "q4" and "no c++" in plan["q4_refused"]
    assert "q4 not taken" in K.describe(plan) and "4-bit blocks not taken" in K.short_description(plan)


def test_a_build_killed_mid_way_does_not_hold_the_next_one():
    """A builder killed mid-build leaves torch's lock file behind (a plain file, never removed); the next process
    must not wait for it forever (it did: a CI run hung in collection until its time ran out). The build comes back
    and the leftover is gone."""
    import subprocess
    import sys
    G.kernel()
    leftover = os.path.join(G.build_directory(), "lock")
    open(leftover, "w").close()
    code = "from eagle_core.model import gguf_blocks as G; print(G.build().vector_path())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == G.kernel().vector_path() and not os.path.exists(leftover)


@pytest.mark.slow
def test_scalar_fallback_equals_the_vector_kernel():
    """Each build the CPU can run gives the native build's weights and products bit for bit (the same fma per
    column, in column order, whatever the path and tile shapes): the scalar code (vector paths turned off) and, on
    an AVX-512 CPU, the AVX2 path (AVX-512 turned off). Rows 1-40 cover the register and buffered tiles; 70 and
    109 outputs a panel hanging over N."""
    native = G.kernel().vector_path()
    if native == "scalar":
        pytest.skip("the native build is the scalar one on this CPU (no AVX-512, no AVX2 + FMA + F16C)")
    variants = {"scalar": ["-mno-avx512f", "-mno-avx2"]}
    if native == "avx512":
        variants["avx2"] = ["-mno-avx512f"]
    builds = {name: G.build(name, flags) for name, flags in variants.items()}
    assert {name: mod.vector_path() for name, mod in builds.items()} == {name: name for name in builds}
    rng = np.random.default_rng(0)
    for kind, (n, k) in [(G.Q4_1, (96, 160)), (G.Q4_1, (109, 96)), (G.Q8_0, (70, 128))]:
        qtype = gguf.GGMLQuantizationType.Q4_1 if kind == G.Q4_1 else gguf.GGMLQuantizationType.Q8_0
        w = rng.standard_normal((n, k)).astype(np.float32)
        blocks = G.Blocks(torch.from_numpy(gguf.quants.quantize(w, qtype)), kind, k, "random")
        weights = blocks.weights()
        xs = {rows: torch.randn(rows, k) for rows in (1, 3, 5, 9, 17, 20, 40)}
        ys = {rows: blocks.linear(x) for rows, x in xs.items()}
        for name, mod in builds.items():
            assert torch.equal(mod.block_weights(blocks.packed, kind, n, k), weights), (name, n)
            for rows, x in xs.items():
                assert torch.equal(mod.block_linear(x, blocks.packed, kind, n, k, None), ys[rows]), (name, n, rows)


def test_layers_that_share_an_input_share_one_call(tiny_gguf, real_tokenizer):
    """q/k/v and gate/up on the block kernel run as one call over their stacked panels (gguf_blocks.stacked_linear):
    the same bits as one call per layer, biases added after, the layers' own panels now views of the stack; layers
    that cannot share a call (rows not a whole number of 64-row groups) are told so (None)."""
    from eagle_core.model.planned_linear import shared_input_linears
    model, path = tiny_gguf
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels="q4", gguf_file=path)
    attn = model.model.layers[0].self_attn
    mods = (attn.q_proj, attn.k_proj, attn.v_proj)
    x = torch.randn(1, 5, attn.q_proj.in_features)
    with torch.inference_mode():
        alone = [m.gguf_blocks.linear(x, None) for m in mods]
        together = shared_input_linears(mods, x)
        assert [t.shape for t in together] == [a.shape for a in alone]
        assert all(torch.equal(t, a) for t, a in zip(together, alone))
        stack = mods[0].gguf_blocks._stack[1]
        assert all(m.gguf_blocks.packed.untyped_storage().data_ptr() == stack.untyped_storage().data_ptr()
                   for m in mods)
        bias = torch.randn(attn.k_proj.out_features)
        b = [m.gguf_blocks for m in mods]
        with_bias = G.stacked_linear(b, x, [None, bias, None])
        assert torch.equal(with_bias[1], b[1].linear(x, bias)) and torch.equal(with_bias[0], alone[0])
        assert target.numerics == "gguf-blocks"
    rng = np.random.default_rng(1)
    odd = G.Blocks(torch.from_numpy(gguf.quants.quantize(rng.standard_normal((40, 64)).astype(np.float32),
                                                         gguf.GGMLQuantizationType.Q4_1)), G.Q4_1, 64, "odd")
    assert G.stacked_linear([odd, odd], torch.randn(2, 64), [None, None]) is None


def test_a_q4_round_of_over_100_rows_is_each_generation_alone(oracle_q4):
    """Four dynamic trees of 31 rows (124 in the round): the round's passes stay within the probed rows
    (decoding/batch.probed_passes: 2 passes), so every generation's cycles equal its cycles alone bit for bit on
    the q4 plan, whose kernel table turns to fp32 above the probed rows."""
    from eagle_core.decoding.batch import step_together
    from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
    target, head = oracle_q4
    assert target.row_independent

    def new(i):
        return EagleDecoder(target, head, DecodeConfig(draft="dynamic", depth=6, top_k=6, total_tokens=30,
                                                       max_new_tokens=24), [1, 100 + i, 7, 300 + i, 11 * i + 5])

    def signature(d):
        return [(r.new_tokens, [n.token_id for n in r.nodes], [n.p for n in r.nodes]) for r in d.cycles]
    alone = []
    for i in range(4):
        d = new(i)
        while not d.done:
            d.step()
        alone.append(signature(d))
    decs = [new(i) for i in range(4)]
    biggest = None
    while not all(d.done for d in decs):
        live = [d for d in decs if not d.done]
        _, info = step_together(live)
        if biggest is None or info.rows > biggest.rows:
            biggest = info
    assert biggest.rows > 100 and biggest.passes >= 2, biggest
    assert [signature(d) for d in decs] == alone
