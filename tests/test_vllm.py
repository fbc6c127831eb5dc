"""The heads leave the project: the export for vLLM is the same function (fc.bias folded exactly; an EAGLE-3 head in
vLLM's "method": "eagle3" layout), and vLLM, run with the exported shipped head (and with an EAGLE-3 head), decodes
what vLLM plain and our engine decode, with our acceptance counters.

The vLLM test needs vLLM's own environment (scripts/setup_vllm.sh; CI makes it and sets
EAGLE_LENS_REQUIRE_VLLM=1, so there a missing vLLM fails instead of skipping)."""
from __future__ import annotations

import json
import os

import pytest
import torch

from eagle_core.model.head import HeadLoadError, random_head
from eagle_core.model.head3 import random_eagle3_head
from eagle_core.export import vllm as ex
from eagle_core.bench import vllm as bv


def folded_layer_output(head, state, e, f):
    """The exported head's function, written out the way vLLM's EAGLE layer computes it (no fc bias)."""
    import torch.nn.functional as F
    x = F.linear(torch.cat((e, f), -1), state["fc.weight"])
    layer = head.layers[0]
    att = layer.self_attn
    n = x.shape[1]
    pos = torch.arange(n)[None]
    cos, sin = head.rotary_emb(x, pos)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    from transformers.models.llama.modeling_llama import rotate_half

    def proj(name, heads):
        y = F.linear(x, state[f"layers.0.self_attn.{name}.weight"], state.get(f"layers.0.self_attn.{name}.bias"))
        return y.view(1, n, heads, att.head_dim).transpose(1, 2)
    q, k, v = proj("q_proj", att.n_heads), proj("k_proj", att.n_kv), proj("v_proj", att.n_kv)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    rep = att.n_heads // att.n_kv
    o = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)
    h = x + F.linear(o.transpose(1, 2).reshape(1, n, -1), state["layers.0.self_attn.o_proj.weight"],
                     state.get("layers.0.self_attn.o_proj.bias"))
    return h + layer.mlp(layer.post_attention_layernorm(h))


def test_folded_bias_computes_the_same_head(tiny_target):
    head = random_head(tiny_target, "shifted", seed=3)
    with torch.no_grad():
        head.fc.bias.normal_(0, 1.0)            # a large bias: dropping it would move every output
        state = ex.head_state_for_vllm(head)
        assert "fc.bias" not in state and torch.equal(state["layers.0.self_attn.o_proj.bias"], head.fc.bias)
        H = head.config.hidden_size
        e, f = torch.randn(1, 7, H), torch.randn(1, 7, H)
        ref = head(f, e, torch.arange(7)[None])
        got = folded_layer_output(head, state, e, f)
        assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4), (got - ref).abs().max()
        dropped = {k: v for k, v in state.items() if not k.endswith("_proj.bias")}
        assert not torch.allclose(folded_layer_output(head, dropped, e, f), ref, atol=1e-2)   # the check can fail
    cfg = ex.head_config_for_vllm(head, tiny_target.model.config, folded=True)
    assert cfg["attention_bias"] and cfg["qkv_bias"] and "bias" not in cfg   # vLLM reads `bias` as attention_bias
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 1


def test_heads_vllm_cannot_represent_are_refused(tiny_target):
    with pytest.raises(ex.ExportError, match="unshifted"):
        ex.head_state_for_vllm(random_head(tiny_target, "unshifted", seed=0))
    head = random_head(tiny_target, "shifted", seed=0, inputs="feature")
    with pytest.raises(ex.ExportError, match="feature only"):
        ex.head_state_for_vllm(head)


def test_export_writes_a_plain_target_and_the_head(tiny_target, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    head = random_head(tiny_target, "shifted", seed=1)
    out = ex.export(tiny_target, head, str(tmp_path))
    cfg = json.load(open(os.path.join(out["target"], "config.json")))
    assert "quantization_config" not in cfg and cfg["architectures"] == ["LlamaForCausalLM"]
    back = AutoModelForCausalLM.from_pretrained(out["target"], dtype=torch.float32)
    ids = torch.randint(0, 1000, (1, 9))
    with torch.no_grad():
        assert torch.allclose(back(ids).logits, tiny_target.model(ids).logits, atol=1e-5)
    assert set(load_file(os.path.join(out["eagle"], "model.safetensors"))) == set(out["tensors"])
    assert os.path.exists(os.path.join(out["target"], "tokenizer_config.json"))
    assert "vllm serve" in ex.commands(str(tmp_path)) and "speculative_config" in ex.commands(str(tmp_path))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def vllm_eagle3_logits(folder, layer_states: dict, embeds):
    """The exported EAGLE-3 head's logits over the target vocabulary at every position, computed from the export
    folder alone the way vLLM 0.32's llama_eagle3.py does: the target layers' states concatenated in eagle_config's
    order, fc; midlayer (renamed layers.0): input_layernorm(embeds) beside hidden_norm(hidden), the un-normed hidden
    as the residual; the final norm, lm_head over the draft vocabulary scattered to target ids d + d2t[d] (-inf
    elsewhere), or straight target columns without d2t."""
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, rotate_half
    cfg = json.load(open(os.path.join(folder, "config.json")))
    st = {k.replace("midlayer.", "layers.0."): v
          for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    w = lambda name: st[f"layers.0.{name}.weight"]            # noqa: E731
    eps, n = cfg["rms_norm_eps"], embeds.shape[1]
    hidden = F.linear(torch.cat([layer_states[i] for i in cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]],
                                -1), st["fc.weight"])
    x = torch.cat((rms_norm(embeds, w("input_layernorm"), eps), rms_norm(hidden, w("hidden_norm"), eps)), -1)
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    q, k, v = (F.linear(x, w(f"self_attn.{p}_proj")).view(1, n, h, hd).transpose(1, 2)
               for p, h in (("q", nh), ("k", nkv), ("v", nkv)))
    cos, sin = LlamaRotaryEmbedding(LlamaConfig(**cfg))(x, torch.arange(n)[None])
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    o = F.scaled_dot_product_attention(q, k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1),
                                       is_causal=True)
    h = hidden + F.linear(o.transpose(1, 2).reshape(1, n, -1), w("self_attn.o_proj"))
    m = rms_norm(h, w("post_attention_layernorm"), eps)
    out = h + F.linear(F.silu(F.linear(m, w("mlp.gate_proj"))) * F.linear(m, w("mlp.up_proj")), w("mlp.down_proj"))
    logits = F.linear(rms_norm(out, st["norm.weight"], eps), st["lm_head.weight"])
    if "d2t" not in st:
        assert cfg["draft_vocab_size"] == cfg["vocab_size"]
        return logits
    full = logits.new_full((*logits.shape[:-1], cfg["vocab_size"]), float("-inf"))
    full[..., torch.arange(cfg["draft_vocab_size"]) + st["d2t"]] = logits
    return full


def our_eagle3_logits(head, layer_states: dict, embeds):
    """Our head's logits over the target vocabulary (-inf outside its draft vocabulary)."""
    hidden = torch.cat([layer_states[i] for i in head.aux_layers], -1)
    logits = head.logits(head(hidden, embeds, torch.arange(embeds.shape[1])[None]))
    full = logits.new_full((*logits.shape[:-1], head.config.vocab_size), float("-inf"))
    full[..., head.target_ids] = logits
    return full


@pytest.mark.parametrize("aux, n_draft", [([1, 0, 1], 300), ([0, 1], None)])
def test_eagle3_export_is_vllms_layout_and_the_same_head(tiny_target, tmp_path, aux, n_draft):
    """An EAGLE-3 head exports to out/eagle3 in vLLM's layout: names, shapes, config fields, d2t giving the head's
    draft -> target map (a shuffled 300-token draft vocabulary), or no d2t for a whole vocabulary in another order
    (its LM head rows put in target order); and the logits vLLM's layer computes from the files alone are the head's,
    with the fc's blocks put in vLLM's layer order (a repeated layer summed)."""
    from safetensors.torch import load_file
    V, H = tiny_target.vocab_size, tiny_target.hidden_size
    g = torch.Generator().manual_seed(0)
    draft = torch.randperm(V, generator=g)[:n_draft] if n_draft else torch.randperm(V, generator=g)
    head = random_eagle3_head(tiny_target, draft, seed=2, aux_layers=aux)
    with torch.no_grad():
        for p in head.parameters():     # norms and all: a mapping that swapped any two would show
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    out = ex.export(tiny_target, head, str(tmp_path))
    folder = str(tmp_path / "eagle3")
    assert out["method"] == "eagle3" and out["head"] == folder and not os.path.exists(tmp_path / "eagle")
    cfg = json.load(open(os.path.join(folder, "config.json")))
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": sorted(set(aux)), "use_aux_hidden_state": True}
    assert cfg["draft_vocab_size"] == draft.numel() and cfg["vocab_size"] == V and cfg["target_hidden_size"] == H
    assert not cfg["attention_bias"] and not cfg["norm_before_residual"] and not cfg["norm_output"]
    st = load_file(os.path.join(folder, "model.safetensors"))
    names = set(ex.EAGLE3_KEYS) | ({"d2t"} if n_draft else set())
    assert set(st) == names and not any(k.startswith(("embed_tokens", "layers.")) or k == "t2d" for k in st)
    qkv = head.midlayer.self_attn
    assert st["fc.weight"].shape == (H, len(set(aux)) * H) and st["lm_head.weight"].shape == (draft.numel(), H)
    assert st["midlayer.self_attn.q_proj.weight"].shape == (qkv.n_heads * qkv.head_dim, 2 * H)
    assert all(v.dtype == torch.float32 for k, v in st.items() if k != "d2t")
    if n_draft:
        assert st["d2t"].dtype == torch.int64 and torch.equal(torch.arange(n_draft) + st["d2t"], draft)
    e = torch.randn(1, 6, H, generator=g)
    states = {i: torch.randn(1, 6, H, generator=g) for i in range(2)}
    with torch.no_grad():
        ref = our_eagle3_logits(head, states, e)
        got = vllm_eagle3_logits(folder, states, e)
        assert torch.equal(torch.isinf(got), torch.isinf(ref))
        fin = torch.isfinite(ref)
        assert torch.allclose(got[fin], ref[fin], atol=1e-4, rtol=1e-4), (got[fin] - ref[fin]).abs().max()
        # the check can fail: the layer states in the head's own order (not vLLM's) give other logits
        swapped = {0: states[1], 1: states[0]}
        assert not torch.allclose(vllm_eagle3_logits(folder, swapped, e)[fin], ref[fin], atol=1e-2)
        back = __import__("eagle_core.model.head", fromlist=["load_head"]).load_head(folder, tiny_target)
        assert torch.allclose(our_eagle3_logits(back, states, e)[fin], ref[fin], atol=1e-4, rtol=1e-4)
    assert ex.eagle3_check(head, out["state"], out["aux_ids"]) < 1e-5
    cmd = ex.commands(str(tmp_path), method="eagle3")
    assert '"method": "eagle3"' in cmd and os.path.join(str(tmp_path), "eagle3") in cmd


def test_eagle3_heads_vllm_cannot_represent_are_refused(tiny_target, tmp_path):
    L = tiny_target.config.num_hidden_layers
    with pytest.raises(ex.ExportError, match="hidden_states"):      # transformers' final normed state
        ex.export(tiny_target, random_eagle3_head(tiny_target, aux_layers=[0, 1, L]), str(tmp_path))
    assert not os.path.exists(tmp_path / "target")                 # refused before anything is written
    twice = torch.tensor([5, 7, 5, 9])
    head = random_eagle3_head(tiny_target, torch.tensor([5, 7, 8, 9]), aux_layers=[0, 1, 1])
    with pytest.raises(HeadLoadError, match="to the same token 5"):     # refused where it is set (head3.py)
        head.set_draft_vocab(twice)
    with torch.no_grad():                                              # and by the export, for a d2t set by hand
        head.d2t.copy_(twice - torch.arange(4))
    with pytest.raises(ex.ExportError, match="twice"):
        ex.export_head(tiny_target, head, str(tmp_path))
    with pytest.raises(ex.ExportError, match="eagle3"):
        ex.head_state_for_vllm(head)


def test_the_lens_shows_the_commands_where_the_head_is_chosen():
    lens = pytest.importorskip("tabs.lens")
    md = lens.vllm_commands_md(True)
    assert "python -m eagle_core.export --head shifted --out eagle-lens-vllm" in md
    assert ".venv-vllm/bin/vllm serve eagle-lens-vllm/target" in md and '"method": "eagle"' in md
    assert "cannot run in vLLM" in lens.vllm_commands_md(False)


def test_first_difference():
    assert bv.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert bv.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert bv.first_difference([1, 2], [1, 2, 3]) == 2


def _state(pid) -> str:
    from eagle_core.bench.machine_load import proc_stat_fields
    fields = proc_stat_fields(pid)
    return fields[0] if fields else "-"


@pytest.mark.slow
@pytest.mark.model
def test_vllm_runs_the_shipped_head_exactly(tmp_path):
    """Export the shipped shifted head; the benchmark's vllm and vllm-eagle methods (vLLM workers, one request at a
    time) decode what transformers' greedy decodes, and vLLM's per-position acceptance counters equal our engine's
    with the same chain (k = 2, full vocabulary). Exact equality is the expectation (same head, same chain shape,
    same greedy rule); a difference would have to be a near-tie flipped by the engines' different fp32 kernels,
    and the assertion message then shows where. The idle engines are stopped while the other methods run, and
    closing them leaves no process behind."""
    if bv.vllm_python() is None:
        if os.environ.get("EAGLE_LENS_REQUIRE_VLLM"):
            pytest.fail("vLLM is not set up: scripts/setup_vllm.sh")
        pytest.skip("vLLM is not set up (scripts/setup_vllm.sh)")
    import time
    from eagle_core.bench import methods, run
    from eagle_core.bench.prompts import load_prompts
    from eagle_core.model.head import resolve_head
    from eagle_core.model.target import load_target
    target = load_target(None, device="cpu", dtype=torch.float32, pack=False)
    head = resolve_head("shifted", target)
    items = load_prompts("humaneval", 3)
    ids = [target.render_prompt(it["prompt"]) for it in items]
    n = 24
    engines = bv.start_engines(target, head, ["vllm", "vllm-eagle"], k=2, eager=True, export_dir=str(tmp_path),
                               log=lambda t: None)
    try:
        time.sleep(1.0)
        for w in engines.values():
            assert len(w.own_pids()) >= 3 and {_state(p) for p in w.alive_pids()} == {"T"}   # stopped while idle
        rep = run.run_bench(target, items, ["hf-greedy", "vllm", "vllm-eagle"], {"shifted": head},
                            max_new_tokens=n, progress=False, warmup=False, engines=engines)
        raw = bv.decode_each(engines["vllm-eagle"], ids, n, list(target.stop_token_ids))
    finally:
        bv.close_engines(engines)
    assert all(not w.alive_pids() for w in engines.values())          # no engine left behind
    ms = rep["methods"]
    for m in ("vllm", "vllm-eagle"):
        assert ms[m]["mismatches"] == 0, (m, rep["per_prompt"][m])
        assert all(r["seconds"] > 0 and r["other_cores"] is not None for r in rep["per_prompt"][m])
    assert ms["vllm"]["tau"] == pytest.approx(1.0) and ms["vllm-eagle"]["tau"] > 1.0
    ours = bv.ours_chain(target, head, ids, n, 2)
    assert raw["counters"]["num_drafts"] > 0
    assert raw["counters"]["accepted_per_pos"] == ours["counters"]["accepted_per_pos"], (raw["counters"], ours)
    assert raw["counters"]["num_drafts"] == ours["counters"]["num_drafts"]
    # the benchmark's histogram from vLLM's counters is our engine's histogram
    from eagle_core.bench.metrics import length_counts
    assert ms["vllm-eagle"]["accept_length_counts"] == length_counts(methods.counters_accept_lengths(ours["counters"]))
    for i, (a, o) in enumerate(zip(raw["results"], ours["results"])):
        assert a["new_ids"] == o["new_ids"], (i, bv.first_difference(a["new_ids"], o["new_ids"]))


@pytest.mark.slow
@pytest.mark.model
def test_vllm_runs_the_shipped_eagle3_head_exactly(tmp_path):
    """The shipped EAGLE-3 head exported as vLLM's "method": "eagle3": the benchmark's vllm-eagle3 method decodes
    what transformers' greedy decodes, and vLLM's acceptance counters (a chain of k = 2) are our engine's with the
    same head and chain: drafts were made and accepted (a layout vLLM misread, the fc's layer order, d2t, would
    draft other tokens and accept fewer). vLLM's counters see right or wrong only, so a misreading that turns
    wrong drafts into other wrong ones passes here: test_eagle3_export_is_vllms_layout_and_the_same_head checks
    the function itself."""
    if bv.vllm_python() is None:
        if os.environ.get("EAGLE_LENS_REQUIRE_VLLM"):
            pytest.fail("vLLM is not set up: scripts/setup_vllm.sh")
        pytest.skip("vLLM is not set up (scripts/setup_vllm.sh)")
    from eagle_core.bench import run
    from eagle_core.bench.prompts import load_prompts
    from eagle_core.model.head import resolve_head
    from eagle_core.model.target import load_target
    target = load_target(None, device="cpu", dtype=torch.float32, pack=False)
    items = load_prompts("humaneval", 3)
    ids = [target.render_prompt(it["prompt"]) for it in items]
    n = 24
    head = resolve_head("eagle3", target)
    engines = bv.start_engines(target, None, ["vllm-eagle3"], k=2, eager=True, export_dir=str(tmp_path),
                               log=lambda t: None, eagle3_head=head)
    try:
        rep = run.run_bench(target, items, ["hf-greedy", "vllm-eagle3"], {"eagle3": head}, max_new_tokens=n,
                            progress=False, warmup=False, engines=engines)
        raw = bv.decode_each(engines["vllm-eagle3"], ids, n, list(target.stop_token_ids))
    finally:
        bv.close_engines(engines)
    assert json.load(open(tmp_path / "eagle3" / "config.json"))["architectures"] == ["LlamaForCausalLMEagle3"]
    assert rep["methods"]["vllm-eagle3"]["mismatches"] == 0, rep["per_prompt"]["vllm-eagle3"]
    assert raw["method"] == "eagle3" and raw["counters"]["num_drafts"] > 0
    ours = bv.ours_chain(target, head, ids, n, 2)
    assert ours["counters"]["accepted_per_pos"][0] > ours["counters"]["num_drafts"] // 4     # the head drafts well
    assert raw["counters"]["accepted_per_pos"] == ours["counters"]["accepted_per_pos"], (raw["counters"], ours)
    assert raw["counters"]["num_drafts"] == ours["counters"]["num_drafts"]
    for i, (a, o) in enumerate(zip(raw["results"], ours["results"])):
        assert a["new_ids"] == o["new_ids"], (i, bv.first_difference(a["new_ids"], o["new_ids"]))


def test_start_engines_exports_only_what_the_methods_need(tiny_target, tmp_path, monkeypatch):
    """`vllm` alone needs only the target folder (no head); `vllm-eagle` needs the head too. The workers are
    replaced by a stand-in: this checks the export, not vLLM."""
    from eagle_core.bench.errors import BenchError
    monkeypatch.setattr(bv, "vllm_python", lambda: "/usr/bin/python3")
    started = []
    monkeypatch.setattr(bv, "VllmWorker",
                        lambda folder, method, k, eager: started.append((folder, method)) or object())
    engines = bv.start_engines(tiny_target, None, ["hf-greedy", "vllm"], export_dir=str(tmp_path), log=lambda t: None)
    assert list(engines) == ["vllm"] and started == [(str(tmp_path), None)]
    assert os.path.exists(tmp_path / "target" / "config.json") and not os.path.exists(tmp_path / "eagle")
    with pytest.raises(BenchError, match="needs the shifted head"):
        bv.start_engines(tiny_target, None, ["vllm-eagle"], export_dir=str(tmp_path), log=lambda t: None)
    bv.start_engines(tiny_target, random_head(tiny_target, "shifted", seed=0), ["vllm-eagle"],
                     export_dir=str(tmp_path), log=lambda t: None)
    assert os.path.exists(tmp_path / "eagle" / "config.json") and started[-1] == (str(tmp_path), "eagle")
    with pytest.raises(BenchError, match="needs the EAGLE-3 head"):
        bv.start_engines(tiny_target, None, ["vllm-eagle3"], export_dir=str(tmp_path), log=lambda t: None)
    with pytest.raises(BenchError, match="cannot export"):      # layer L: refused by the export, said by the bench
        bv.start_engines(tiny_target, None, ["vllm-eagle3"], export_dir=str(tmp_path), log=lambda t: None,
                         eagle3_head=random_eagle3_head(tiny_target, aux_layers=[0, 1, 2]))
    bv.start_engines(tiny_target, None, ["vllm-eagle3"], export_dir=str(tmp_path), log=lambda t: None,
                     eagle3_head=random_eagle3_head(tiny_target, aux_layers=[0, 1, 1]))
    assert os.path.exists(tmp_path / "eagle3" / "config.json") and started[-1] == (str(tmp_path), "eagle3")
    assert bv.start_engines(tiny_target, None, ["vanilla"], log=lambda t: None) == {}
