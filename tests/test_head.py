"""Head checkpoints: our safetensors round trip, the released EAGLE-1 layout, and refusal of unsafe pickles."""
from __future__ import annotations

import json
import os

import pytest
import torch

from eagle_core.model.head import EagleHead, HeadLoadError, head_config_from_target, load_head, random_head


def _outputs(head, H, seed=0):
    g = torch.Generator().manual_seed(seed)
    f, e = torch.randn(1, 5, H, generator=g), torch.randn(1, 5, H, generator=g)
    with torch.no_grad():
        return head(f, e, torch.arange(5)[None])


def test_save_load_round_trip(tiny_target, tmp_path):
    head = random_head(tiny_target, "unshifted", seed=3)
    head.save(str(tmp_path / "h"))
    names = sorted(os.listdir(tmp_path / "h"))
    assert names == ["config.json", "model.safetensors"]
    back = load_head(str(tmp_path / "h"), tiny_target)
    assert back.shift == "unshifted"
    torch.testing.assert_close(_outputs(head, 64), _outputs(back, 64))
    from safetensors.torch import load_file
    keys = set(load_file(str(tmp_path / "h" / "model.safetensors")))
    assert "embed_tokens.weight" not in keys and "fc.weight" in keys
    assert "layers.0.self_attn.q_proj.weight" in keys and "layers.0.post_attention_layernorm.weight" in keys


def _eagle1_checkpoint(folder, target, bias: bool):
    """A file laid out like yuhuili/EAGLE-* releases: Llama config + pytorch_model.bin with embed_tokens."""
    os.makedirs(folder, exist_ok=True)
    cfg = head_config_from_target(target.config, bias=bias)
    d = cfg.to_dict()
    d.pop("eagle_shift", None)           # released configs do not record it: shifted is the default
    d["bias"] = bias
    d["architectures"] = ["LlamaForCausalLM"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(d, f)
    ref = EagleHead(cfg)
    state = {k: v for k, v in ref.state_dict().items() if not k.startswith("rotary_emb")}
    state["embed_tokens.weight"] = torch.randn(target.vocab_size, target.hidden_size)
    state["layers.0.input_layernorm.weight"] = torch.ones(target.hidden_size)
    torch.save(state, os.path.join(folder, "pytorch_model.bin"))
    return ref


@pytest.mark.parametrize("bias", [True, False])
def test_loads_released_eagle1_layout(tiny_target, tmp_path, bias):
    ref = _eagle1_checkpoint(str(tmp_path / "e1"), tiny_target, bias)
    head = load_head(str(tmp_path / "e1"), tiny_target)
    assert head.shift == "shifted" and (head.fc.bias is not None) == bias
    torch.testing.assert_close(_outputs(ref, 64), _outputs(head, 64))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/eagle_lens_pwned",))


def test_refuses_code_running_pickle(tiny_target, tmp_path):
    folder = tmp_path / "evil"
    _eagle1_checkpoint(str(folder), tiny_target, True)
    torch.save({"fc.weight": _Evil()}, str(folder / "pytorch_model.bin"))
    with pytest.raises(HeadLoadError, match="weights-only"):
        load_head(str(folder), tiny_target)
    assert not os.path.exists("/tmp/eagle_lens_pwned")


def test_hidden_size_mismatch_is_clear(tiny_target, tmp_path, real_tokenizer):
    from conftest import tiny_llama
    from eagle_core.model.target import load_target
    other = load_target(model=tiny_llama(hidden=32), tokenizer=real_tokenizer, device="cpu")
    random_head(other).save(str(tmp_path / "small"))
    with pytest.raises(HeadLoadError, match="hidden size 32 does not match"):
        load_head(str(tmp_path / "small"), tiny_target)


def test_missing_head_is_clear(tiny_target, tmp_path):
    with pytest.raises(HeadLoadError, match="not found"):
        load_head(str(tmp_path / "nope"), tiny_target)


# ---------------------------------------------------------------- the Paper lab's single-input heads
def test_single_input_heads_read_only_their_input(tiny_target):
    H = tiny_target.hidden_size
    g = torch.Generator().manual_seed(5)
    f, e, e2, f2 = (torch.randn(1, 4, H, generator=g) for _ in range(4))
    pos = torch.arange(4)[None]
    feat_only = random_head(tiny_target, inputs="feature", seed=1)
    tok_only = random_head(tiny_target, inputs="token", seed=1)
    assert feat_only.fc.weight.shape == tok_only.fc.weight.shape == (H, H)
    assert (feat_only.kind, tok_only.kind) == ("feature only", "token only")
    with torch.no_grad():
        torch.testing.assert_close(feat_only(f, e, pos), feat_only(f, e2, pos))       # token never read
        assert not torch.allclose(feat_only(f, e, pos), feat_only(f2, e, pos))
        torch.testing.assert_close(tok_only(f, e, pos), tok_only(f2, e, pos))         # feature never read
        assert not torch.allclose(tok_only(f, e, pos), tok_only(f, e2, pos))
    with pytest.raises(HeadLoadError, match="shifted pairing"):
        EagleHead(head_config_from_target(tiny_target.config, "unshifted", inputs="token"))


def test_single_input_head_fp16_round_trip_and_mismatch(tiny_target, tmp_path):
    head = random_head(tiny_target, inputs="token", seed=2)
    head.save(str(tmp_path / "t"), dtype=torch.float16)
    from safetensors.torch import load_file
    assert load_file(str(tmp_path / "t" / "model.safetensors"))["fc.weight"].dtype == torch.float16
    back = load_head(str(tmp_path / "t"), tiny_target)
    assert back.inputs == "token" and back.fc.weight.dtype == torch.float32
    assert json.loads((tmp_path / "t" / "config.json").read_text())["dtype"] == "float16"
    torch.testing.assert_close(_outputs(head, 64), _outputs(back, 64), atol=2e-3, rtol=2e-3)
    cfg_path = tmp_path / "t" / "config.json"
    d = json.loads(cfg_path.read_text())
    d["eagle_inputs"] = "feature+token"      # a config that lies about the inputs is named, not half-loaded
    cfg_path.write_text(json.dumps(d))
    with pytest.raises(HeadLoadError, match="fc takes 64 inputs"):
        load_head(str(tmp_path / "t"), tiny_target)
