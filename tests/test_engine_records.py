"""The page's records are built outside the timed cycle, and lean records (record_topk = 0) tell the same story."""
from __future__ import annotations

import copy
import statistics
import time
from dataclasses import asdict

import pytest

from eagle_core.decoding.engine import DecodeConfig, EagleDecoder

SLEEP = 0.05
PROMPT = [1, 400, 5000, 77, 912]


def _decode(target, head, **kw):
    dec = EagleDecoder(target, head, DecodeConfig(**kw), PROMPT)
    t0 = time.perf_counter()
    while not dec.done:
        dec.step()
    return dec, time.perf_counter() - t0


def _cycle_seconds(dec) -> list[float]:
    return [r.draft_seconds + r.verify_seconds + r.other_seconds for r in dec.cycles[1:]]


def test_record_building_is_not_timed(oracle):
    """token_bytes (read only to build records) sleeping 50 ms per call leaves the cycles' timings alone: it used
    to land in other_seconds, at least 50 ms a cycle (every cycle commits a token)."""
    target, head = oracle
    slow = copy.copy(target)
    calls = []

    def slow_bytes(t):
        calls.append(t)
        time.sleep(SLEEP)
        return target.token_bytes(t)
    slow.token_bytes = slow_bytes
    slow.token_text = target.token_text          # texts (cached per decoder) stay fast: only bytes sleep
    kw = dict(draft="chain", depth=4, max_new_tokens=24, record_topk=5)
    _decode(target, head, **kw)                  # warm-up: first-call caches are not what is measured
    fast, _ = _decode(target, head, **kw)
    got, wall = _decode(slow, head, **kw)
    assert got.new_ids == fast.new_ids and len(got.cycles) > 3
    assert len(calls) == len(got.new_ids)        # the records were built, bytes and all
    assert all(len(r.new_token_bytes) == len(r.new_tokens) for r in got.cycles)
    # a cycle's own time does not grow by the sleeps (>= 50 ms a cycle, ~5 tokens a cycle here: ~250 ms); the
    # median and the 2x + 50 ms margin keep a busy 2-core machine's hiccups from failing it
    assert statistics.median(len(r.new_tokens) for r in got.cycles[1:]) >= 3
    assert statistics.median(_cycle_seconds(got)) < 2 * statistics.median(_cycle_seconds(fast)) + SLEEP
    assert statistics.median(r.other_seconds for r in got.cycles[1:]) < SLEEP
    # the decoder's seconds are the cycles' timed regions only; the sleeps happened outside them
    timed = sum(r.draft_seconds + r.verify_seconds + r.other_seconds for r in got.cycles)
    assert got.seconds == pytest.approx(timed)
    assert wall - got.seconds > 0.9 * SLEEP * len(calls)


def _story(rec) -> dict:
    """A record without its presentation (texts, bytes, top-k lists) and without its timings."""
    d = asdict(rec)
    for k in ("draft_seconds", "verify_seconds", "other_seconds", "bonus_text", "residual_topk", "new_token_bytes"):
        d.pop(k)
    for n in d["nodes"]:
        for k in ("text", "target_topk", "draft_topk"):
            n.pop(k)
    return d


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("shape", [dict(draft="static", tree="mc_sim_7b_63"), dict(draft="chain", depth=3),
                                   dict(draft="dynamic", depth=4, top_k=3, total_tokens=8), dict(draft="vanilla")],
                         ids=["static", "chain", "dynamic", "vanilla"])
def test_lean_records_agree_with_full_records(oracle, shape, temperature):
    """record_topk = 0 drops texts, bytes and distributions; tokens, tree, path, tests and counts are the same."""
    target, head = oracle
    head = None if shape["draft"] == "vanilla" else head
    kw = dict(max_new_tokens=16, temperature=temperature, seed=5, **shape)
    full, _ = _decode(target, head, record_topk=5, **kw)
    lean, _ = _decode(target, head, record_topk=0, **kw)
    assert lean.new_ids == full.new_ids
    assert [_story(r) for r in lean.cycles] == [_story(r) for r in full.cycles]
    assert any(r.accept_length for r in full.cycles) or shape["draft"] == "vanilla"
    for f, r in zip(full.cycles, lean.cycles):
        assert r.bonus_text == f.bonus_text and r.residual_topk == []
        assert all(n.target_topk == [] and n.draft_topk == [] for n in r.nodes)
        assert len(f.nodes[0].target_topk) == 5
        # the top 5 of the distribution the bonus/correction was drawn from, and the drawn token after them when
        # it came from the tail (its bar is always shown)
        ids = [t.token_id for t in f.residual_topk]
        assert f.bonus_token in ids and (len(ids) == 5 or (len(ids) == 6 and ids[-1] == f.bonus_token))
        assert len(f.new_token_bytes) == len(f.new_tokens)
        if r.cycle > 0:   # the prefill record names its one token even when lean, as it always has
            assert r.new_token_bytes == [] and all(n.text == "" for n in r.nodes)
            assert [n.text for n in f.nodes] == [target.token_text(n.token_id) for n in f.nodes]
