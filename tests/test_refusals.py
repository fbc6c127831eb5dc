"""Heads and targets the engine cannot run exactly are refused at load, with a message for users: an EAGLE-3 d2t map
that sends two draft columns to one token or a column outside the vocabulary, an EAGLE-3 config whose fused input
is as wide as its hidden state, a config whose sizes do not fit its weights (before anything is allocated), and a
sliding-window target is run only inside its window."""
from __future__ import annotations

import json
import random
import time

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import MistralConfig, MistralForCausalLM

from conftest import TinyTokenizer, tiny_llama
from eagle_core.decoding.engine import DecodeConfig, generate
from eagle_core.model.head import HeadLoadError, load_head, random_head
from eagle_core.model.head3 import Eagle3Head, eagle3_config_from_target, random_eagle3_head
from eagle_core.model.target import load_target

V = 16


@pytest.fixture(scope="module")
def small():
    model = tiny_llama(vocab_size=V, hidden=64, layers=4, seed=3, eos_token_id=None)
    return load_target(model=model, tokenizer=TinyTokenizer(V), device="cpu", kernels="fp32")


def _saved_eagle3(target, folder, edit_d2t=None):
    head = random_eagle3_head(target, torch.tensor(random.Random(0).sample(range(V), 12)), seed=4)
    head.save(str(folder))
    if edit_d2t is not None:
        path = folder / "model.safetensors"
        state = load_file(str(path))
        edit_d2t(state["d2t"])
        save_file(state, str(path))
    return head


def test_a_sound_eagle3_head_loads(small, tmp_path):
    head = _saved_eagle3(small, tmp_path / "ok")
    back = load_head(str(tmp_path / "ok"), small)
    assert torch.equal(back.target_ids, head.target_ids)


def test_d2t_mapping_two_columns_to_one_token_is_refused(small, tmp_path):
    def twice(d2t):            # column 5 now names column 4's token: id(5) = 5 + d2t[5] = 4 + d2t[4]
        d2t[5] = 4 + d2t[4] - 5
    _saved_eagle3(small, tmp_path / "dup", twice)
    with pytest.raises(HeadLoadError, match="maps draft ids 4 and 5 to the same token"):
        load_head(str(tmp_path / "dup"), small)
    head = random_eagle3_head(small, torch.arange(12), seed=1)
    with pytest.raises(HeadLoadError, match="to the same token 3"):
        head.set_draft_vocab(torch.tensor([0, 1, 2, 3, 3, 5, 6, 7, 8, 9, 10, 11]))


def test_d2t_mapping_outside_the_vocabulary_is_refused(small, tmp_path):
    def outside(d2t):
        d2t[7] = V + 3 - 7
    _saved_eagle3(small, tmp_path / "out", outside)
    with pytest.raises(HeadLoadError, match=f"draft id 7 to token {V + 3}, outside the target's vocabulary of {V}"):
        load_head(str(tmp_path / "out"), small)


def test_fused_input_as_wide_as_the_hidden_state_is_refused(small, tmp_path):
    """One target layer of the head's own width: forward could not tell a target input from the head's output and
    would skip fc on the target's states."""
    cfg = eagle3_config_from_target(small.config, V, aux_layers=[2])
    with pytest.raises(HeadLoadError, match="cannot tell the target's states from its own output"):
        Eagle3Head(cfg)
    _saved_eagle3(small, tmp_path / "one")
    d = json.loads((tmp_path / "one" / "config.json").read_text())
    d["eagle_aux_layers"] = [2]
    d["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2]
    (tmp_path / "one" / "config.json").write_text(json.dumps(d))
    with pytest.raises(HeadLoadError, match="cannot tell the target's states"):
        load_head(str(tmp_path / "one"), small)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_config_that_does_not_fit_its_weights_is_refused_before_allocating(small, tmp_path, kind):
    """intermediate_size of 10^8 would make a 77 GB MLP: the check reads the file's shapes and builds the head on
    the meta device, so the refusal comes at once and allocates nothing."""
    folder = tmp_path / kind
    if kind == "eagle1":
        random_head(small).save(str(folder))
    else:
        _saved_eagle3(small, folder)
    d = json.loads((folder / "config.json").read_text())
    d["intermediate_size"] = 10 ** 8
    (folder / "config.json").write_text(json.dumps(d))
    t0 = time.perf_counter()
    with pytest.raises(HeadLoadError, match=r"do not fit its config.json: .*mlp.*_proj.weight is (128x64|64x128), the config makes it"):
        load_head(str(folder), small)
    assert time.perf_counter() - t0 < 5


def _mistral(window: int):
    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                        sliding_window=window, tie_word_embeddings=True, bos_token_id=1, eos_token_id=None)
    model = MistralForCausalLM(cfg).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(8.0)
    return model


def test_a_sliding_window_target_runs_inside_its_window():
    """A Mistral-style target attends within a window of 24 tokens; the tree mask attends to the whole prefix. The
    engine runs it only while the sequence fits the window (where the window masks nothing), so EAGLE is exact there
    (the same tokens as transformers' own greedy generate, which applies the window) and stops at its edge."""
    target = load_target(model=_mistral(24), tokenizer=TinyTokenizer(V), device="cpu", kernels="fp32")
    assert target.max_context == 24
    ids = [1, 5, 9, 3]
    head = random_head(target, seed=2)
    got = generate(target, head, DecodeConfig(draft="dynamic", depth=3, top_k=3, total_tokens=6,
                                              max_new_tokens=64), ids)
    ref = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=64), ids)
    assert got.finished == "context" and len(ids) + len(got.token_ids) + 2 + 7 <= 24 + 7
    assert got.token_ids == ref.token_ids[:len(got.token_ids)]
    hf = target.model.generate(torch.tensor([ids]), max_new_tokens=len(got.token_ids), do_sample=False,
                               eos_token_id=None)[0, len(ids):].tolist()
    assert got.token_ids == hf
    with pytest.raises(ValueError, match="context is 24 \\(its sliding window"):
        generate(target, head, DecodeConfig(max_new_tokens=4), list(range(1, 16)) * 2)
    no_window = load_target(model=_mistral(None), tokenizer=TinyTokenizer(V), device="cpu", kernels="fp32")
    assert no_window.max_context == 512
