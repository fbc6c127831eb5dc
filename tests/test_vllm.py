"""The heads leave the project: the export for vLLM is the same function (fc.bias folded exactly), and vLLM, run
with the exported shipped head, decodes what vLLM plain and our engine decode, with our acceptance counters.

The vLLM test needs vLLM's own environment (scripts/setup_vllm.sh; CI makes it and sets
EAGLE_LENS_REQUIRE_VLLM=1, so there a missing vLLM fails instead of skipping)."""
from __future__ import annotations

import json
import os

import pytest
import torch

from eagle_core.model.head import random_head
from eagle_core import export as ex
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


def test_start_engines_exports_only_what_the_methods_need(tiny_target, tmp_path, monkeypatch):
    """`vllm` alone needs only the target folder (no head); `vllm-eagle` needs the head too. The workers are
    replaced by a stand-in: this checks the export, not vLLM."""
    from eagle_core.bench.errors import BenchError
    monkeypatch.setattr(bv, "vllm_python", lambda: "/usr/bin/python3")
    started = []
    monkeypatch.setattr(bv, "VllmWorker", lambda folder, eagle, k, eager: started.append((folder, eagle)) or object())
    engines = bv.start_engines(tiny_target, None, ["hf-greedy", "vllm"], export_dir=str(tmp_path), log=lambda t: None)
    assert list(engines) == ["vllm"] and started == [(str(tmp_path), False)]
    assert os.path.exists(tmp_path / "target" / "config.json") and not os.path.exists(tmp_path / "eagle")
    with pytest.raises(BenchError, match="needs the shifted head"):
        bv.start_engines(tiny_target, None, ["vllm-eagle"], export_dir=str(tmp_path), log=lambda t: None)
    bv.start_engines(tiny_target, random_head(tiny_target, "shifted", seed=0), ["vllm-eagle"],
                     export_dir=str(tmp_path), log=lambda t: None)
    assert os.path.exists(tmp_path / "eagle" / "config.json") and started[-1] == (str(tmp_path), True)
    assert bv.start_engines(tiny_target, None, ["vanilla"], log=lambda t: None) == {}
