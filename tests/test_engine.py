"""Greedy identity, KV consistency and end-to-end sampling of the decoding loop, on tiny targets."""
from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from conftest import TinyTokenizer, tiny_llama, tree_vs_steps
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder, generate
from eagle_core.model.head import random_head
from eagle_core.model.target import load_target

SHAPES = [dict(draft="chain", depth=4), dict(draft="static", tree="cpu-12"),
          dict(draft="static", tree="mc_sim_7b_63"), dict(draft="dynamic", depth=5, top_k=4, total_tokens=16)]


def prompts(n=20, seed=0):
    rng = random.Random(seed)
    return [[1] + [rng.randrange(3, 49000) for _ in range(rng.randrange(2, 24))] for _ in range(n)]


def hf_greedy(target, ids, n):
    out = target.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                eos_token_id=target.stop_token_ids, pad_token_id=0)
    return out[0, len(ids):].tolist()


def run(target, head, ids, **kw):
    return generate(target, head, DecodeConfig(**kw), ids)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s["draft"] + s.get("tree", ""))
@pytest.mark.slow   # 10-46 s each on the 2-core machine
def test_greedy_identity_random_head(tiny_target, tiny_random_head, shape):
    for ids in prompts():
        ref = run(tiny_target, None, ids, draft="vanilla", max_new_tokens=24)
        assert ref.token_ids == hf_greedy(tiny_target, ids, 24)
        got = run(tiny_target, tiny_random_head, ids, max_new_tokens=24, **shape)
        assert got.token_ids == ref.token_ids


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s["draft"] + s.get("tree", ""))
def test_greedy_identity_oracle_head(oracle, shape):
    target, head = oracle
    depth_hits = 0
    for ids in prompts(seed=1):
        ref = run(target, None, ids, draft="vanilla", max_new_tokens=32)
        assert ref.token_ids == hf_greedy(target, ids, 32)
        got = run(target, head, ids, max_new_tokens=32, **shape)
        assert got.token_ids == ref.token_ids
        max_depth = max(n.depth for c in got.cycles for n in c.nodes)
        depth_hits += sum(c.accept_length == max_depth for c in got.cycles[1:])
        assert got.tau > 2.5, "the oracle head drafts the target exactly: long paths must be accepted"
    assert depth_hits > 20  # full-depth acceptance is exercised


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s["draft"] + s.get("tree", ""))
def test_greedy_identity_bf16_kernels(oracle_bf16, shape):
    """The bf16 numerical model: EAGLE equals plain greedy decoding with the same kernels, token for token,
    and plain decoding's steps equal transformers' generate on the same (planned) model."""
    target, head = oracle_bf16
    for ids in prompts(8, seed=11):
        ref = run(target, None, ids, draft="vanilla", max_new_tokens=32)
        assert ref.token_ids == hf_greedy(target, ids, 32)
        got = run(target, head, ids, max_new_tokens=32, **shape)
        assert got.token_ids == ref.token_ids
        assert got.tau > 2.5


@pytest.mark.slow   # 10-46 s each on the 2-core machine
def test_greedy_identity_noisy_head_mixed_acceptance(oracle):
    """A head that is right some of the time: accepted paths of every length, corrections mid-tree."""
    target, head = oracle
    noisy = copy.deepcopy(head)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        noisy.fc.weight.add_(torch.randn(noisy.fc.weight.shape, generator=g) * 0.08)
    lengths = set()
    for ids in prompts(8, seed=2):
        ref = run(target, None, ids, draft="vanilla", max_new_tokens=32)
        for shape in SHAPES:
            got = run(target, noisy, ids, max_new_tokens=32, **shape)
            assert got.token_ids == ref.token_ids
            lengths.update(c.accept_length for c in got.cycles[1:])
    assert len(lengths) >= 3, lengths


@pytest.mark.slow   # 10-46 s each on the 2-core machine
def test_draft_vocabulary_keeps_greedy_identity(tiny_target, tiny_random_head):
    """A draft LM head over the 2048 most frequent tokens: drafts stay inside it, output stays exact."""
    from eagle_core.model.vocab import load_draft_vocab
    vocab = load_draft_vocab(2048, tiny_target.tokenizer)
    assert vocab is not None and vocab.numel() == 2048
    allowed = set(vocab.tolist())
    for ids in prompts(6, seed=6):
        ref = run(tiny_target, None, ids, draft="vanilla", max_new_tokens=16)
        for shape in SHAPES:
            got = run(tiny_target, tiny_random_head, ids, max_new_tokens=16, draft_vocab=2048,
                      draft_dtype="bfloat16", **shape)
            assert got.token_ids == ref.token_ids
            assert all(n.token_id in allowed for c in got.cycles[1:] for n in c.nodes[1:])


@pytest.mark.parametrize("draft_dtype", ["bfloat16", "mixed"])
def test_bf16_draft_keeps_identity_and_acceptance(oracle, draft_dtype):
    """Drafting in bfloat16, or with an fp32 head and a bf16 draft LM head ("mixed", the CPU default), is a speed
    lever that changes only q: output identical, the oracle still accepted."""
    target, head = oracle
    for ids in prompts(6, seed=7):
        ref = run(target, None, ids, draft="vanilla", max_new_tokens=24)
        dec = EagleDecoder(target, head, DecodeConfig(max_new_tokens=24, draft="static", tree="mc_sim_7b_63",
                                                      draft_dtype=draft_dtype), ids)
        while not dec.done:
            dec.step()
        got = dec.result()
        assert got.token_ids == ref.token_ids and got.tau > 2.5
    assert dec.drafter.lm.weight.dtype == torch.bfloat16
    assert dec.drafter.dtype == (torch.float32 if draft_dtype == "mixed" else torch.bfloat16)


def test_q8_draft_keeps_identity_and_runs_the_block_kernel(oracle):
    """"q8" (a q4 target's default draft): the head's linear layers and the draft LM head as Q8_0 blocks on the
    GGUF block kernel at every row count; a speed lever that changes only q: output identical to plain decoding, the
    oracle still accepted, every product of the draft on the blocks (an fp32 fallback would fail here)."""
    from eagle_core.model import gguf_blocks
    from eagle_core.model.planned_linear import GGUF, PlannedLinear
    target, head = oracle
    for ids in prompts(4, seed=9):
        ref = run(target, None, ids, draft="vanilla", max_new_tokens=24)
        dec = EagleDecoder(target, head, DecodeConfig(max_new_tokens=24, draft="static", tree="mc_sim_7b_63",
                                                      draft_dtype="q8"), ids)
        while not dec.done:
            dec.step()
        got = dec.result()
        assert got.token_ids == ref.token_ids and got.tau > 2.5
    d = dec.drafter
    assert d.kernels == "q8" and d.kernels_note is None and d.lm.weight.dtype == torch.float32
    lins = [m for m in d.head.modules() if isinstance(m, torch.nn.Linear)] + [d.lm]
    assert len(lins) >= 9
    changed = 0
    for m in lins:
        assert isinstance(m, PlannedLinear) and m.gguf_blocks.kind == gguf_blocks.Q8_0
        assert {m.kernel_for(r) for r in (1, 7, 81, 300)} == {GGUF}
        w, got_w = m.weight.detach(), m.gguf_blocks.weights()
        s = w.abs().reshape(w.shape[0], -1, 32).amax(-1, keepdim=True) / 127     # each block's scale, and fp16's
        bound = s * 0.5 + 127 * (s - s.half().float()).abs() + 1e-3 * s          # half a step, s's rounding
        err = (got_w - w).abs().reshape(w.shape[0], -1, 32)
        assert bool((err <= bound).all())
        changed += not torch.equal(got_w, w)
    assert changed >= 3           # quantized, not the fp32 weights (the oracle's zero layers stay zero)
    assert d.head is not head and head.fc.weight.dtype == torch.float32   # a planned copy: the head untouched


def test_q8_of_a_q8_row_is_the_row_itself():
    """quantize_q8_0 is llama.cpp's quantizer: a weight that is already Q8_0 (the GGUF's tied embedding, which the
    draft LM head takes its rows from) comes back bit for bit; an fp32 weight does not."""
    import numpy as np
    import gguf
    from eagle_core.model import gguf_blocks
    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(0))
    q8 = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(w.numpy(), gguf.GGMLQuantizationType.Q8_0),
                                                 gguf.GGMLQuantizationType.Q8_0).astype(np.float32))
    assert torch.equal(gguf_blocks.quantize_q8_0(q8, "test").weights(), q8)
    assert torch.equal(gguf_blocks.quantize_q8_0(w, "test").weights(), q8)
    assert not torch.equal(q8, w)


def test_unshifted_head_and_records(oracle):
    target, head = oracle
    unshifted = random_head(target, "unshifted")
    ids = prompts(1, seed=3)[0]
    ref = run(target, None, ids, draft="vanilla", max_new_tokens=20)
    got = run(target, unshifted, ids, max_new_tokens=20, draft="static", tree="mc_sim_7b_63")
    assert got.token_ids == ref.token_ids
    rec = run(target, head, ids, max_new_tokens=20, draft="static", tree="mc_sim_7b_63").cycles[1]
    assert rec.nodes[0].status == "root" and len(rec.nodes) == 26
    assert [rec.nodes[i].status for i in rec.accepted_path] == ["accepted"] * rec.accept_length
    assert rec.new_tokens == rec.accepted_tokens + [rec.bonus_token]
    for i in rec.accepted_path:  # accepted nodes at T = 0 are the target's argmax under their parent
        par = rec.nodes[rec.nodes[i].parent]
        assert par.target_topk[0].token_id == rec.nodes[i].token_id
    assert rec.draft_seconds > 0 and rec.verify_seconds > 0
    import json
    json.dumps(rec.to_dict())


def test_kv_cache_matches_fresh_prefill(oracle, tiny_target, tiny_random_head):
    from transformers import DynamicCache
    for target, head in (oracle, (tiny_target, tiny_random_head)):
        ids = prompts(1, seed=4)[0]
        dec = EagleDecoder(target, head, DecodeConfig(draft="static", tree="mc_sim_7b_63", max_new_tokens=200), ids)
        for _ in range(6):
            dec.step()
        committed = dec.tokens[:-1]           # the root (last token) is not in the cache yet
        fresh = DynamicCache()
        target.forward(torch.tensor([committed]), past_key_values=fresh)
        assert dec.cache.get_seq_length() == len(committed)
        # the engine keeps a float64 cache where the target's plan is row-independent (engine.kv_cache_dtype,
        # decided by the load-time probe, so it varies by machine): the values are compared, not the dtype
        for a, b in zip(dec.cache.layers, fresh.layers):
            torch.testing.assert_close(a.keys, b.keys.to(a.keys.dtype), atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(a.values, b.values.to(a.values.dtype), atol=1e-5, rtol=1e-4)


def test_stops_on_eos_and_budget(tiny_target, tiny_random_head):
    ids = prompts(1, seed=5)[0]
    ref = run(tiny_target, None, ids, draft="vanilla", max_new_tokens=30)
    stop = ref.token_ids[7]
    target = copy.copy(tiny_target)
    target.stop_token_ids = [stop]
    got = run(target, tiny_random_head, ids, draft="static", max_new_tokens=30)
    first = ref.token_ids.index(stop)
    assert got.token_ids == ref.token_ids[:first + 1] and got.finished == "eos"
    got = run(tiny_target, tiny_random_head, ids, draft="chain", max_new_tokens=5)
    assert len(got.token_ids) == 5 and got.finished == "max_new_tokens"


def test_dynamic_tree_to_the_end_of_the_budget(tiny_target, tiny_random_head):
    """The head's cache holds every expanded node of a wide dynamic tree, up to the last token."""
    for ids in prompts(3, seed=8):
        ref = run(tiny_target, None, ids, draft="vanilla", max_new_tokens=12)
        got = run(tiny_target, tiny_random_head, ids, draft="dynamic", depth=5, top_k=6, total_tokens=10,
                  max_new_tokens=12)
        assert got.token_ids == ref.token_ids


def test_context_limit(real_tokenizer):
    target = load_target(model=tiny_llama(max_position_embeddings=64), tokenizer=real_tokenizer, device="cpu")
    head = random_head(target)
    with pytest.raises(ValueError, match="context"):
        EagleDecoder(target, head, DecodeConfig(), list(range(3, 70)))
    got = run(target, head, list(range(3, 20)), draft="static", max_new_tokens=500)
    assert got.finished == "context" and 17 + len(got.token_ids) <= 64


@pytest.mark.parametrize("draft_kw", [dict(draft="chain", depth=3), dict(draft="static", tree="cpu-8"),
                                      dict(draft="dynamic", depth=3, top_k=3, total_tokens=6)],
                         ids=["chain", "static", "dynamic"])
@pytest.mark.slow   # 10-46 s each on the 2-core machine
def test_sampling_end_to_end_matches_target(draft_kw):
    """T = 1 on a 6-token vocabulary: the joint law of 3 generated tokens equals the target's (chi-square)."""
    V = 6
    model = tiny_llama(vocab_size=V, hidden=32, layers=2, seed=3, eos_token_id=None)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(6.0)   # peaked but not degenerate distributions
    target = load_target(model=model, tokenizer=TinyTokenizer(V), device="cpu")
    head = random_head(target, seed=1)
    # a head that is often right: copy the argmax structure by training-free perturbation is not needed;
    # acceptance happens because both distributions are peaked on few tokens
    prompt = [1, 4, 2]
    # exact target law of (x1, x2, x3)
    with torch.no_grad():
        seqs = [(a, b, c) for a in range(V) for b in range(V) for c in range(V)]
        exact = {}
        for a in range(V):
            pa = torch.softmax(model(torch.tensor([prompt])).logits[0, -1], -1)[a]
            for b in range(V):
                pb = torch.softmax(model(torch.tensor([prompt + [a]])).logits[0, -1], -1)[b]
                pc = torch.softmax(model(torch.tensor([prompt + [a, b]])).logits[0, -1], -1)
                for c in range(V):
                    exact[(a, b, c)] = float(pa * pb * pc[c])
    n = 3000
    counts = {s: 0 for s in seqs}
    accepted = 0
    for seed in range(n):
        dec = EagleDecoder(target, head, DecodeConfig(temperature=1.0, seed=seed, max_new_tokens=3,
                                                      record_topk=0, **draft_kw), prompt)
        while not dec.done:
            dec.step()
        counts[tuple(dec.new_ids)] += 1
        accepted += sum(c.accept_length for c in dec.cycles)
    assert accepted > n // 4, "drafts must be accepted often enough to exercise the tree rules"
    # merge rare outcomes so every bin expects >= 5
    obs, exp, rest_o, rest_e = [], [], 0, 0.0
    for s in seqs:
        if exact[s] * n >= 5:
            obs.append(counts[s]); exp.append(exact[s] * n)
        else:
            rest_o += counts[s]; rest_e += exact[s] * n
    obs.append(rest_o); exp.append(rest_e)
    exp = np.array(exp) * sum(obs) / sum(exp)
    assert chisquare(obs, exp).pvalue > 1e-3


def test_sessions_build_decoders_concurrently(tiny_target):
    """Classroom: several sessions building their first decoder at once share one packed bf16 head copy and one
    draft LM head (a deep copy of a half-packed copy used to fail: 'Cannot access storage of OpaqueTensorImpl')."""
    import threading

    from eagle_core.decoding.draft import head_in_dtype
    errors, copies = [], []
    for trial in range(8):
        head = random_head(tiny_target, seed=trial)
        bar = threading.Barrier(4)

        def build():
            bar.wait()
            try:
                copies.append(head_in_dtype(head, torch.bfloat16))
                EagleDecoder(tiny_target, head, DecodeConfig(draft_vocab=2048, draft_dtype="bfloat16"), [1, 5, 7])
            except Exception as exc:  # noqa: BLE001 -- any failure is the bug
                errors.append(repr(exc))
        threads = [threading.Thread(target=build) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert len({id(c) for c in copies[-4:]}) == 1
    assert not errors, errors[:2]


def _single_input_oracle(target, head, inputs):
    """The oracle head with fc reading one input: `token` keeps the oracle (it only ever used the embedding)."""
    from eagle_core.model.head import EagleHead, head_config_from_target
    H = target.hidden_size
    one = EagleHead(head_config_from_target(target.config, "shifted", inputs=inputs))
    state = dict(head.state_dict())
    state["fc.weight"] = state["fc.weight"][:, :H] if inputs == "token" else state["fc.weight"][:, H:]
    one.load_state_dict(state)
    return one.eval()


def _sibling_draft_dists(rec):
    """For every node with two or more expanded children: the children's draft top-k token lists."""
    kids = {}
    for n in rec.nodes[1:]:
        if n.draft_topk:
            kids.setdefault(n.parent, []).append(tuple(t.token_id for t in n.draft_topk))
    return [v for v in kids.values() if len(v) > 1]


@pytest.mark.slow   # 10-46 s each on the 2-core machine
def test_token_only_oracle_drafts_and_feature_only_cannot_branch(oracle):
    """A token-only head drafts like the oracle (it only ever read the embedding); a feature-only head gives
    every child of one node the same draft distribution (it never learns which token was drafted), where a
    feature & token head tells the branches apart; all stay exact."""
    target, head = oracle
    tok_only = _single_input_oracle(target, head, "token")
    feat_only = random_head(target, inputs="feature", seed=4)
    both = random_head(target, seed=4)
    differing = 0
    for ids in prompts(4, seed=11):
        ref = run(target, None, ids, draft="vanilla", max_new_tokens=24)
        got = run(target, tok_only, ids, max_new_tokens=24, draft="chain", depth=4)
        assert got.token_ids == ref.token_ids and got.tau > 2.5
        for h, same in ((feat_only, True), (both, False)):
            res = run(target, h, ids, max_new_tokens=24, draft="static", tree="mc_sim_7b_63")
            assert res.token_ids == ref.token_ids
            groups = [g for c in res.cycles[1:] for g in _sibling_draft_dists(c)]
            assert groups
            if same:
                assert all(len(set(g)) == 1 for g in groups)
            else:
                differing += sum(len(set(g)) > 1 for g in groups)
    assert differing > 0


@pytest.fixture(scope="module")
def wide_bf16_target(real_tokenizer):
    from conftest import skip_without_bf16
    skip_without_bf16()
    return load_target(model=tiny_llama(hidden=256, layers=2, seed=3), tokenizer=real_tokenizer, device="cpu",
                       kernels="bf16")


def test_bf16_tree_pass_equals_one_token_steps(wide_bf16_target):
    """With bf16 linear layers (row-independent) and the float64 KV cache (attention summed in float64), a tree
    pass over a 300-token prefix computes each chain node's logits exactly as plain decoding's one-token steps
    do, with siblings interleaved between the chain's nodes (bit for bit; on the embedded target too, where
    float32 attention parts by up to ~0.4 in the logits: tests/test_integration.py)."""
    from eagle_core.decoding.engine import kv_cache_dtype
    target = wide_bf16_target
    assert target.numerics == "bf16-linear" and kv_cache_dtype(target) == torch.float64
    chain, sibling = tree_vs_steps(target, torch.float64)
    assert chain == [0.0] * 4
    assert sibling > 1e-2                                               # a sibling is not its chain neighbour
