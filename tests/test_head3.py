"""The EAGLE-3 head (model/head3.py): its file layout, the engine drafting with it (greedy identity, the output law),
and its training objective (training-time test, training/objective3.py) on a small target."""
from __future__ import annotations

import json
import os
import random

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import TinyTokenizer, tiny_llama
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder, generate
from eagle_core.model.head import HeadLoadError, load_head
from eagle_core.model.head3 import Eagle3Head, default_aux_layers, random_eagle3_head
from eagle_core.model.target import load_target

V = 16
SHAPES = [dict(draft="chain", depth=4), dict(draft="static", tree="cpu-12"),
          dict(draft="static", tree="mc_sim_7b_63"), dict(draft="dynamic", depth=4, top_k=4, total_tokens=12)]


@pytest.fixture(scope="module")
def small():
    """A 4-layer random Llama over 16 tokens (sharp enough that a random head's drafts are sometimes right) and a
    random EAGLE-3 head reading layers 2, 2, 1, with a 12-token draft vocabulary in a shuffled order."""
    model = tiny_llama(vocab_size=V, hidden=64, layers=4, seed=3, eos_token_id=None)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(8.0)
    target = load_target(model=model, tokenizer=TinyTokenizer(V), device="cpu", kernels="fp32")
    ids = torch.tensor(random.Random(0).sample(range(V), 12))
    head = random_eagle3_head(target, ids, seed=4)
    return target, head


def repeating_eagle3_head(target, draft_ids, noise=0.3, lm_noise=0.5, seed=6):
    """An EAGLE-3 head that mostly drafts "the next token repeats the last one": its fc passes on the final normed
    state (hidden_states[L], the last of the layers it reads) plus noise, its attention and MLP add a little, and
    its LM head is the target's rows for its draft vocabulary (plus noise). A random tied-embedding target falls
    into repeating its tokens, so these drafts are accepted to full depth when the repeated token is in the draft
    vocabulary and rejected at the root when it is not."""
    L = target.config.num_hidden_layers
    head = random_eagle3_head(target, draft_ids, seed=seed, aux_layers=[1, 2, L])
    H = target.hidden_size
    with torch.no_grad():
        head.fc.weight.mul_(noise / 0.02 / (3 * H) ** 0.5)
        head.fc.weight[:, 2 * H:] += torch.eye(H)
        head.midlayer.self_attn.o_proj.weight.mul_(0.5)
        head.midlayer.mlp.down_proj.weight.mul_(0.5)
        rows = target.lm_head.weight[draft_ids]
        head.lm_head.weight.copy_(rows + lm_noise * rows.std() * torch.randn(rows.shape))
        head.norm.weight.fill_(1.0)
    return head


def test_head_reads_the_layers_its_config_names(small):
    target, head = small
    assert head.aux_layers == default_aux_layers(4) == [2, 2, 1]
    assert head.fc.in_features == 3 * 64
    ids = torch.tensor([[1, 5, 7, 3]])
    with torch.inference_mode():
        _, fused = target.forward(ids, aux_layers=head.aux_layers)
        hs = target.model(ids, output_hidden_states=True).hidden_states
    assert fused.shape == (1, 4, 3 * 64)
    assert torch.equal(fused, torch.cat([hs[2], hs[2], hs[1]], dim=-1))
    with torch.inference_mode():
        _, last = target.forward(ids, aux_layers=(4,))   # hidden_states[L]: the final, normed state
    assert torch.equal(last, hs[4])


def test_save_and_load_the_released_layout(small, tmp_path):
    target, head = small
    head.save(str(tmp_path / "h3"), dtype=torch.float16)
    state = load_file(str(tmp_path / "h3" / "model.safetensors"))
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "midlayer.hidden_norm.weight", "norm.weight",
            "lm_head.weight", "d2t", "t2d"} <= set(state)
    assert state["t2d"].sum() == 12 and state["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * 64
    cfg = json.load(open(tmp_path / "h3" / "config.json"))
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 12
    again = load_head(str(tmp_path / "h3"), target)
    assert isinstance(again, Eagle3Head) and torch.equal(again.target_ids, head.target_ids)
    x, e = torch.randn(1, 3, 3 * 64), torch.randn(1, 3, 64)
    pos = torch.arange(3)[None]
    with torch.no_grad():
        assert torch.allclose(again(x, e, pos), head.half().float()(x, e, pos), atol=1e-5)
    # vLLM's "speculators" naming (model.layers.0.*) loads the same weights
    renamed = {("model.layers.0." + k[len("midlayer."):]) if k.startswith("midlayer.") else k: v
               for k, v in state.items()}
    os.makedirs(tmp_path / "v", exist_ok=True)
    save_file(renamed, str(tmp_path / "v" / "model.safetensors"))
    json.dump(cfg, open(tmp_path / "v" / "config.json", "w"))
    assert torch.equal(load_head(str(tmp_path / "v"), target).midlayer.self_attn.q_proj.weight,
                       again.midlayer.self_attn.q_proj.weight)


def test_bad_files_say_what_is_wrong(small, tmp_path):
    target, head = small
    head.save(str(tmp_path / "h3"))
    cfg = json.load(open(tmp_path / "h3" / "config.json"))
    cfg["eagle_aux_layers"] = [2, 15, 27]
    json.dump(cfg, open(tmp_path / "h3" / "config.json", "w"))
    with pytest.raises(HeadLoadError, match="reads target layers"):
        load_head(str(tmp_path / "h3"), target)
    state = load_file(str(tmp_path / "h3" / "model.safetensors"))
    del state["d2t"]
    save_file(state, str(tmp_path / "h3" / "model.safetensors"))
    cfg["eagle_aux_layers"] = [2, 2, 1]
    json.dump(cfg, open(tmp_path / "h3" / "config.json", "w"))
    with pytest.raises(HeadLoadError, match="d2t"):
        load_head(str(tmp_path / "h3"), target)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s["draft"] + s.get("tree", ""))
def test_greedy_identity_with_an_eagle3_head(small, shape):
    target, _ = small
    head = repeating_eagle3_head(target, torch.tensor(random.Random(0).sample(range(V), 12)))
    accepted, lengths = 0, set()
    rng = random.Random(1)
    for _ in range(12):
        ids = [rng.randrange(V) for _ in range(rng.randrange(2, 12))]
        ref = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=24), ids)
        got = generate(target, head, DecodeConfig(max_new_tokens=24, **shape), ids)
        assert got.token_ids == ref.token_ids
        accepted += sum(c.accept_length for c in got.cycles)
        lengths.update(c.accept_length for c in got.cycles[1:])
    assert accepted > 12, "some drafts must be accepted (the acceptance path is exercised)"
    assert 0 in lengths and max(lengths) >= 3, lengths


def test_eagle3_drafts_are_its_own_vocabulary(small):
    """Every drafted token is in the head's draft vocabulary (columns mapped through d2t), and the records carry
    the head's q for it."""
    target, head = small
    allowed = set(head.target_ids.tolist())
    dec = EagleDecoder(target, head, DecodeConfig(draft="static", tree="cpu-12", max_new_tokens=16, record_topk=3),
                       [1, 2, 3])
    drafted = 0
    while not dec.done:
        rec = dec.step()
        for node in rec.nodes[1:]:
            assert node.token_id in allowed and 0 < node.q <= 1
            drafted += 1
    assert drafted > 0


def _drafts_keep_the_targets_output(target, head, draft_dtype, prompts, new_tokens, seed):
    """EAGLE with `draft_dtype` gives plain decoding's tokens on random prompts; returns the last decoder."""
    rng = random.Random(seed)
    for _ in range(prompts):
        ids = [rng.randrange(V) for _ in range(rng.randrange(2, 12))]
        ref = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=new_tokens), ids)
        dec = EagleDecoder(target, head, DecodeConfig(max_new_tokens=new_tokens, draft="static", tree="cpu-12",
                                                      draft_dtype=draft_dtype), ids)
        while not dec.done:
            dec.step()
        assert dec.result().token_ids == ref.token_ids
    return dec


def _q_moves_only_by(d, head, out, tol):
    """The drafter's q against the head's own (fp32) q on features `out`: within `tol`, and not equal."""
    want = torch.softmax(head.logits(out).float(), -1)
    got = torch.softmax(d._draft_logits(out.to(d.dtype)).float(), -1)
    assert (got - want).abs().max() < tol and not torch.equal(got, want)
    return want


def test_eagle3_drafts_on_q8_blocks_and_keeps_the_output(small):
    """"q8" (the draft beside a 4-bit target): the EAGLE-3 head's layers and its own LM head as Q8_0 blocks on the
    block kernel; q moves by the quantization only and the output stays the target's."""
    from eagle_core.model.planned_linear import GGUF
    target, _ = small
    head = repeating_eagle3_head(target, torch.tensor(random.Random(0).sample(range(V), 12)))
    d = _drafts_keep_the_targets_output(target, head, "q8", 4, 16, seed=3).drafter
    assert d.kernels == "q8" and d.lm is not head.lm_head and d.lm.kernel_for(1) == GGUF
    _q_moves_only_by(d, head, torch.randn(5, target.hidden_size), 0.05)


@pytest.mark.parametrize("draft_dtype", ["mixed", "bfloat16"])
def test_eagle3_drafts_through_its_lm_head_in_the_draft_lm_dtype(small, draft_dtype):
    """"mixed" (the CPU default) and bf16 give the EAGLE-3 head's own LM head the draft LM dtype, as EAGLE-1's draft
    LM head gets it (a packed bf16 copy, the norm still in the head's dtype): q moves by bf16 rounding only and
    the output stays the target's."""
    target, _ = small
    head = repeating_eagle3_head(target, torch.tensor(random.Random(0).sample(range(V), 12)))
    d = _drafts_keep_the_targets_output(target, head, draft_dtype, 6, 20, seed=2).drafter
    assert d.lm.weight.dtype == torch.bfloat16 and d.lm is not head.lm_head
    assert d.dtype == (torch.float32 if draft_dtype == "mixed" else torch.bfloat16)
    out = torch.randn(5, target.hidden_size)
    want = _q_moves_only_by(d, head, out, 0.02)
    fp32 = EagleDecoder(target, head, DecodeConfig(max_new_tokens=4, draft="chain", depth=2), [1, 2]).drafter
    assert (torch.softmax(fp32._draft_logits(out).float(), -1) - want).abs().max() < 1e-5   # fp32: head.logits
    with torch.no_grad():       # a head trained on in place: the next drafter's LM-head copy follows it
        head.lm_head.weight.mul_(2.0)
    again = EagleDecoder(target, head, DecodeConfig(max_new_tokens=4, draft="chain", depth=2), [1, 2]).drafter
    twice = torch.softmax(head.logits(out).float(), -1)
    assert (torch.softmax(again._draft_logits(out).float(), -1) - twice).abs().max() < 1e-5


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.6, 0.9)])
def test_output_law_with_an_eagle3_head(temperature, top_p):
    """The first three tokens' joint law equals the warped target's (the chi-square check of test_exactness)."""
    from test_exactness import exact_law, law_check
    import test_exactness as tx
    model = tiny_llama(vocab_size=tx.V, layers=4, seed=1, eos_token_id=None)
    target = load_target(model=model, tokenizer=TinyTokenizer(tx.V), device="cpu", kernels="fp32")
    head = random_eagle3_head(target, torch.tensor([5, 2, 7, 0, 1, 6]), seed=2)
    counts, accepted = {}, 0
    n = 400
    for seed in range(n):
        cfg = DecodeConfig(draft="static", tree="cpu-12", temperature=temperature, top_p=top_p, seed=seed,
                           max_new_tokens=3, record_topk=0)
        dec = EagleDecoder(target, head, cfg, tx.PROMPT)
        while not dec.done:
            dec.step()
        counts[tuple(dec.new_ids)] = counts.get(tuple(dec.new_ids), 0) + 1
        accepted += sum(c.accept_length for c in dec.cycles)
    pvalue, outside = law_check(counts, exact_law(target, temperature, top_p, 0))
    assert not outside and pvalue > tx.P_MIN
    assert accepted > n // 10


def test_training_time_test_learns_to_draft_from_its_own_outputs(small):
    """A few hundred steps of the EAGLE-3 objective on the target's own greedy continuations: the loss falls at
    every step of the roll-out, the held-out alpha of depth 1 (drafting from its own output) rises, and the
    engine with the trained head stays token-identical while accepting more."""
    from eagle_core.training.evaluate import evaluate
    from eagle_core.training.objective import Frozen
    from eagle_core.training.objective3 import eagle3_loss
    target, random_head3 = small
    head = random_eagle3_head(target, torch.arange(V), seed=5)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.lm_head.weight)
        head.norm.weight.copy_(target.model.model.norm.weight)
    H = target.hidden_size
    rng = random.Random(3)

    def sequences(n):
        out = []
        for _ in range(n):
            prompt = [rng.randrange(V) for _ in range(3)]
            ids = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=29), prompt).token_ids
            ids = torch.tensor(prompt + ids)
            with torch.inference_mode():
                _, feats = target.forward(ids[None], aux_layers=(4,) + tuple(head.aux_layers))
            mask = torch.ones(len(ids), dtype=torch.bool)
            mask[:3] = False
            out.append((ids, feats[0].clone(), mask))
        return out
    train, held = sequences(48), sequences(12)

    class Seq:
        def __init__(self, i, t):
            self.conv_id, (self.input_ids, self.features, self.loss_mask) = f"s{i}", t
    held_seqs = [Seq(i, t) for i, t in enumerate(held)]
    frozen = Frozen(target, torch.device("cpu"), vocab_ids=head.target_ids)
    before = evaluate(head, frozen, held_seqs, "shifted", depth=2)
    head.train()
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    first = None
    for step in range(150):
        batch = [train[(step * 8 + b) % len(train)] for b in range(8)]
        ids = torch.stack([b[0] for b in batch])
        feats = torch.stack([b[1] for b in batch])
        mask = torch.stack([b[2] for b in batch])
        loss, ces, agree, n = eagle3_loss(head, frozen, ids, feats, mask, steps=2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first or ces
    assert all(c < f * 0.7 for c, f in zip(ces, first)), (first, ces)
    after = evaluate(head.eval(), frozen, held_seqs, "shifted", depth=2)
    assert after["feature_loss"] is None
    assert after["alpha"][1] > before["alpha"][1] + 0.2, (before["alpha"], after["alpha"])
    acc = {}
    for name, h in (("random", random_head3), ("trained", head)):
        acc[name] = 0
        for ids, _, _ in held:
            prompt = ids[:3].tolist()
            ref = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=20), prompt)
            got = generate(target, h, DecodeConfig(draft="chain", depth=3, max_new_tokens=20), prompt)
            assert got.token_ids == ref.token_ids
            acc[name] += sum(c.accept_length for c in got.cycles)
    assert acc["trained"] > 2 * acc["random"], acc


def test_how_can_i_shows_the_eagle3_drafts_the_engine_would_make(small):
    """The "How can I" record's EAGLE-3 distribution after branch t is the drafter's own first draft after root t
    (the engine's catch-up over the fused prefix), mapped to target ids: zero outside the draft vocabulary."""
    from eagle_core.decoding.ambiguity import compute_ambiguity
    from eagle_core.decoding.draft import DraftSpec, Drafter
    from eagle_core.model.head import random_head
    target, head = small
    rec = compute_ambiguity(target, random_head(target, "shifted"), random_head(target, "unshifted", seed=1),
                            "3 5 7 9", n_branches=3, k=4, eagle3_head=head,
                            cfg=DecodeConfig(draft="chain", depth=1))   # the drafter below: the head's own dtype
    assert rec.eagle3_head and all(len(b.eagle3_next) == 4 and len(b.vocab_eagle3) == len(b.vocab)
                                   for b in rec.branches)
    allowed = set(head.target_ids.tolist())
    ids = target.render_prompt("3 5 7 9", chat_template=False)
    with torch.inference_mode():
        _, fused = target.forward(torch.tensor([ids]), aux_layers=head.aux_layers)
        for br in rec.branches:
            d = Drafter(head, target, DraftSpec(kind="chain", depth=1), 64)
            out = d.catch_up(fused, ids + [br.token_id])[0, -1]
            q = torch.softmax(head.logits(out).float(), -1)
            for t in br.eagle3_next:
                col = (head.target_ids == t.token_id).nonzero()
                assert (float(q[col[0, 0]]) if len(col) else 0.0) == pytest.approx(t.prob, abs=1e-5)
                assert t.token_id in allowed or t.prob == 0.0


def test_an_eagle3_head_made_under_inference_mode_drafts(small):
    """A head built inside torch.inference_mode has no version counter: its LM-head copy is still made (once)."""
    target, _ = small
    with torch.inference_mode():
        head = random_eagle3_head(target, torch.arange(V), seed=8)
    ids = [1, 2, 3]
    ref = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=8), ids)
    got = generate(target, head, DecodeConfig(draft="chain", depth=3, max_new_tokens=8, draft_dtype="mixed"), ids)
    from eagle_core.decoding.draft import _LM_COPIES
    assert got.token_ids == ref.token_ids and len(_LM_COPIES[head]) == 1
