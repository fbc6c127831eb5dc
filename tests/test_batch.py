"""A round (decoding/batch.py): many generations' trees verified in one packed target pass. Each generation's output
is its output alone: under a row-independent kernel plan token for token and record for record at any temperature
(its own generator draws the same numbers against the same probabilities), under the fp32 plan up to the kernels'
rounding; its KV cache is what a fresh prefill of its tokens gives; generations join and leave between rounds."""
from __future__ import annotations

import pytest
import torch

from conftest import oracle_pair, tiny_llama
from eagle_core.decoding.batch import step_together
from eagle_core.decoding.draft import DraftSpec
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
from eagle_core.model.head import random_head
from eagle_core.model.head3 import random_eagle3_head
from eagle_core.model.target import load_target

# (head, settings, prompt): shapes, heads (oracle, random unshifted, EAGLE-3) and temperatures mixed in one round
SESSIONS = [
    ("oracle", dict(draft="static", tree="cpu-12"), [1, 400, 17]),
    ("oracle", dict(draft="chain", depth=4, temperature=0.8, seed=3), [1, 9, 9, 2300, 5]),
    ("unshifted", dict(draft="dynamic", depth=3, top_k=4, total_tokens=10, temperature=1.0, top_p=0.9, seed=5),
     [1, 77]),
    ("eagle3", dict(draft="chain", depth=3), [1, 300, 301, 302]),
    (None, dict(draft="vanilla", temperature=0.7, seed=11), [1, 5000, 6]),
    ("oracle", dict(draft="dynamic", depth=4, top_k=4, total_tokens=12, temperature=0.6, seed=8), [1, 42]),
]
# the q4 target's draft ("q8": head and draft LM head as Q8_0 blocks), in a round beside fp32 drafts of the same heads
Q8_SESSIONS = SESSIONS[:2] + [
    ("oracle", dict(draft="static", tree="cpu-12", draft_dtype="q8"), [1, 2, 3, 4000]),
    ("unshifted", dict(draft="chain", depth=3, draft_dtype="q8", temperature=0.9, seed=2), [1, 640, 8]),
    ("oracle", dict(draft="dynamic", depth=3, top_k=4, total_tokens=10, draft_dtype="q8", temperature=0.7, seed=6),
     [1, 900]),
]


def _heads(target, head):
    return {"oracle": head, "unshifted": random_head(target, "unshifted", seed=4),
            "eagle3": random_eagle3_head(target, seed=5), None: None}


def _decoders(target, heads, sessions=SESSIONS, n_tokens=24):
    return [EagleDecoder(target, heads[h], DecodeConfig(max_new_tokens=n_tokens, **cfg), ids)
            for h, cfg, ids in sessions]


def _alone(target, heads, sessions=SESSIONS, n_tokens=24):
    out = []
    for dec in _decoders(target, heads, sessions, n_tokens):
        while not dec.done:
            dec.step()
        out.append(dec)
    return out


def _together(decs, shapes=None):
    rounds = []
    while not all(d.done for d in decs):
        live = [d for d in decs if not d.done]
        _, info = step_together(live, shapes)
        rounds.append(info)
    return rounds


@pytest.fixture(scope="module")
def exact(real_tokenizer):
    target, head = oracle_pair(real_tokenizer, kernels="exact")
    assert target.row_independent
    return target, _heads(target, head)


def _signature(dec):
    """Every cycle's committed tokens, accepted path, tree tokens, and each node's q and p, exactly."""
    return [(r.new_tokens, r.accepted_path, [n.token_id for n in r.nodes], [n.q for n in r.nodes],
             [n.p for n in r.nodes]) for r in dec.cycles]


def test_a_round_is_each_generation_alone_bit_for_bit(exact):
    target, heads = exact
    alone = _alone(target, heads)
    decs = _decoders(target, heads)
    rounds = _together(decs)
    assert max(r.sessions for r in rounds) == len(SESSIONS) and max(r.rows for r in rounds) > 20
    for a, b, (h, cfg, _) in zip(alone, decs, SESSIONS):
        assert b.new_ids == a.new_ids, (h, cfg)
        assert _signature(b) == _signature(a), (h, cfg)        # every tree, path and q: the same cycles
    assert sum(len(r.accepted_path) for r in decs[0].cycles) > 10   # the oracle's trees were really accepted
    shared = [r for r in decs[0].cycles[1:] if r.pass_sessions > 1]
    assert shared and all(r.pass_rows > len(r.nodes) for r in shared)


def test_a_round_drafts_every_tree_in_packed_head_forwards(exact, monkeypatch):
    """Trees on one head grow in lockstep: each level is ONE head forward (and one LM-head matmul) for the whole
    round, not one per generation; another head (here the unshifted one) gets a forward of its own."""
    from eagle_core.decoding import draft_calls
    target, heads = exact
    sessions = [("oracle", dict(draft="chain", depth=3), [1, 400 + i, 17]) for i in range(4)]
    sessions.append(("unshifted", dict(draft="chain", depth=3), [1, 77]))
    decs = _decoders(target, heads, sessions, n_tokens=12)
    step_together(decs)                                  # prefills (one pass)
    calls = {"head": [], "lm": []}
    for kind, name in (("head", "run_heads"), ("lm", "run_lms")):
        real = getattr(draft_calls, name)
        monkeypatch.setattr(draft_calls, name, lambda cs, real=real, kind=kind: calls[kind].append(len(cs)) or real(cs))
    step_together(decs)
    # per head: the catch-up and two expansions (depth 3); the three levels' LM heads are the target's for both
    # EAGLE-1 heads, so all five generations share each
    assert sorted(calls["head"]) == [1, 1, 1, 4, 4, 4] and calls["lm"] == [5, 5, 5]


def test_a_round_of_q8_drafts_is_each_generation_alone_bit_for_bit(exact):
    """q8 drafts (the block kernel, row-independent) packed with each other and with fp32 drafts: every tree, path
    and q as alone, at T = 0 and T > 0."""
    target, heads = exact
    alone = _alone(target, heads, Q8_SESSIONS)
    decs = _decoders(target, heads, Q8_SESSIONS)
    _together(decs)
    assert [d.drafter.kernels for d in decs[2:]] == ["q8"] * 3
    for a, b, (h, cfg, _) in zip(alone, decs, Q8_SESSIONS):
        assert b.new_ids == a.new_ids, (h, cfg)
        assert _signature(b) == _signature(a), (h, cfg)
    assert sum(len(r.accepted_path) for r in decs[2].cycles) > 10   # the q8 oracle's trees were really accepted


def test_prefills_join_the_rounds_pass(exact, monkeypatch):
    """A class pressing Step together: every fresh generation's prompt is read in the round's one pass (one per
    set of target layers the heads read: the EAGLE-3 head's is another), beside the trees of those past their
    prefill, the LM head on each prompt's last row only; the outputs are each generation's alone (above)."""
    target, heads = exact
    decs = _decoders(target, heads)
    decs[0].step()                                       # past its prefill: it drafts a tree this round
    passes = []
    real = target.forward_packed
    monkeypatch.setattr(target, "forward_packed",
                        lambda parts, aux=(): passes.append([p.logits for p in parts]) or real(parts, aux))
    records, info = step_together(decs)
    assert sorted(len(p) for p in passes) == [1, 5]      # the EAGLE-3 generation's layers, everyone else's
    assert sorted(x for p in passes for x in p if x != "last") == [True] and info.prefills == 5
    assert info.sessions == 6 and info.rows == sum(len(ids) for _, _, ids in SESSIONS[1:]) + len(records[0].nodes)
    assert [r.cycle for r in records] == [1, 0, 0, 0, 0, 0]
    monkeypatch.undo()
    alone = _decoders(target, heads)
    for a, b in zip(alone[1:], decs[1:]):
        a.step()
        assert _signature(b) == _signature(a) and b.new_ids == a.new_ids


def test_the_kv_cache_is_a_fresh_prefill_after_batched_rounds(exact):
    target, heads = exact
    decs = _decoders(target, heads, n_tokens=14)
    _together(decs)
    for dec in decs:
        n = len(dec.tokens) - 1                     # committed entries (the last token is the next root)
        fresh = EagleDecoder(target, None, DecodeConfig(draft="vanilla", max_new_tokens=1), dec.tokens[:n])
        fresh.step()
        for got, ref in zip(dec.cache.layers, fresh.cache.layers):
            torch.testing.assert_close(got.keys[:, :, :n].float(), ref.keys[:, :, :n].float(), atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got.values[:, :, :n].float(), ref.values[:, :, :n].float(), atol=1e-4,
                                       rtol=1e-4)


def test_generations_join_and_leave_between_rounds(exact):
    """Continuous batching: one generation leaves after two rounds (a Stop: never stepped again), another joins at
    the third; everyone else's output is still its output alone."""
    target, heads = exact
    alone = _alone(target, heads)
    decs = _decoders(target, heads)
    late, leaver = decs[4], decs[1]
    step_together([d for d in decs if d is not late])
    step_together([d for d in decs if d is not late])
    stayed = [d for d in decs if d is not leaver]
    _together(stayed)
    for a, b in zip(alone, decs):
        if b is not leaver:
            assert b.new_ids == a.new_ids
    assert leaver.new_ids == alone[1].new_ids[:len(leaver.new_ids)] and not leaver.done


def test_a_smaller_tree_under_load_keeps_the_generation_exact(exact):
    """A cycle's shape may shrink (a chain of 1, or no draft at all) without changing what is generated at T = 0,
    and the head keeps up with the features meanwhile (the next full tree is accepted as before)."""
    target, heads = exact
    sessions = [("oracle", dict(draft="static", tree="cpu-12"), [1, 400, 17]),
                ("oracle", dict(draft="dynamic", depth=4, top_k=4, total_tokens=12), [1, 42])]
    alone = _alone(target, heads, sessions)
    decs = _decoders(target, heads, sessions)
    small = [DraftSpec(kind="vanilla"), DraftSpec(kind="chain", depth=1)]
    step_together(decs)                               # prefills
    for _ in range(3):
        step_together(decs, small)
    _together(decs)
    for a, b in zip(alone, decs):
        assert b.new_ids == a.new_ids
        assert [len(r.nodes) for r in b.cycles[1:4]] in ([1, 1, 1], [2, 2, 2])
        assert max(len(r.accepted_path) for r in b.cycles[4:]) >= 3
    dec = _decoders(target, heads, sessions[:1])[0]
    dec.step()
    with pytest.raises(ValueError, match="smaller than the generation"):
        step_together([dec], [DraftSpec(kind="dynamic", depth=12, top_k=16, total_tokens=80)])


def test_under_the_fp32_plan_a_round_differs_by_rounding_only(real_tokenizer):
    """The default plan on this CPU (plain kernels for one row, packed for more) is not row-independent: a pass
    over everyone's rows rounds a generation's probabilities differently from its pass alone, by ~1e-6; tokens
    part only at a near-tie (none in this random model)."""
    target = load_target(model=tiny_llama(seed=21), tokenizer=real_tokenizer, device="cpu", kernels="fp32")
    assert not target.row_independent
    heads = {"h": random_head(target, seed=1)}
    sessions = [("h", dict(draft="chain", depth=3), [1, 2, 3 + i]) for i in range(4)]
    alone = _alone(target, heads, sessions, 8)
    decs = _decoders(target, heads, sessions, 8)
    _together(decs)
    for a, b in zip(alone, decs):
        assert b.new_ids == a.new_ids
        for ra, rb in zip(a.cycles, b.cycles):
            assert [n.token_id for n in ra.nodes] == [n.token_id for n in rb.nodes]
            assert max(abs(x.p - y.p) for x, y in zip(ra.nodes, rb.nodes)) < 1e-5


def test_each_record_times_its_own_share_of_the_round(exact):
    """A record's draft and verify seconds are its share of the round (its nodes of the drafting, its rows of the
    pass), the round's totals beside: the shares of one round add up to its totals, a bigger tree gets the bigger
    share, and a generation without a tree gets no drafting time."""
    target, heads = exact
    h = heads["oracle"]
    cfgs = [dict(draft="static", tree="cpu-12"), dict(draft="chain", depth=2), dict(draft="vanilla")]
    decs = [EagleDecoder(target, None if c["draft"] == "vanilla" else h, DecodeConfig(max_new_tokens=20, **c),
                         [1, 100 + i, 7, 300 + i]) for i, c in enumerate(cfgs)]
    for d in decs:
        d.step()
    recs, info = step_together(decs)
    assert all(r.round_verify_seconds == info.seconds and r.round_draft_seconds == info.draft_seconds for r in recs)
    assert abs(sum(r.verify_seconds for r in recs) - info.seconds) < 1e-9
    assert abs(sum(r.draft_seconds for r in recs) - info.draft_seconds) < 1e-9
    big, small, none = recs
    assert big.verify_seconds > small.verify_seconds > none.verify_seconds > 0
    assert big.draft_seconds > small.draft_seconds > 0 and none.draft_seconds == 0
    alone = decs[0]
    rec = alone.step()
    assert rec.round_verify_seconds == 0 and rec.verify_seconds > 0      # alone: its own times, no round


def test_a_seeded_generation_samples_the_same_text_alone_and_in_a_class(real_tokenizer):
    """At T > 0 on a broad model (a random target and head: no near-one-hot distributions, so every draft and
    acceptance is a real draw), each seeded generation samples in a class of four exactly the text it samples
    alone: every student drafts the tree they set (serving/rounds.py) and draws from their own generator."""
    target = load_target(model=tiny_llama(seed=22), tokenizer=real_tokenizer, device="cpu", kernels="exact")
    assert target.row_independent
    heads = {"h": random_head(target, seed=3), None: None}
    sessions = [("h", dict(draft="chain", depth=3, temperature=1.0, seed=11), [1, 2, 3]),
                ("h", dict(draft="static", tree="cpu-12", temperature=0.8, seed=12), [1, 2, 4]),
                ("h", dict(draft="dynamic", depth=3, top_k=3, total_tokens=8, temperature=1.2, seed=13), [1, 2, 5]),
                (None, dict(draft="vanilla", temperature=1.0, seed=14), [1, 2, 6])]
    alone = _alone(target, heads, sessions, 24)
    decs = _decoders(target, heads, sessions, 24)
    _together(decs)
    p_max = max(n.p for d in alone for r in d.cycles[1:] for n in r.nodes[1:])
    assert p_max < 0.5, "a near-one-hot model would hide a changed draw"
    assert sum(r.bonus_kind == "correction" for d in alone for r in d.cycles) > 5, "the draws were tested"
    for a, b in zip(alone, decs):
        assert b.new_ids == a.new_ids
    # the same seeds with other seeds' neighbours: a changed draw changes the text (the test can tell)
    other = _alone(target, heads, [(h, dict(c, seed=c["seed"] + 100), ids) for h, c, ids in sessions], 24)
    assert [d.new_ids for d in other] != [d.new_ids for d in alone]
