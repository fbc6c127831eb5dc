"""Trees sized by the load (decoding/load_budget.py): one student keeps its tree; as the class grows the tree shrinks
to a chain or none, and by the model's measured costs a round never yields fewer tokens per second than plain
batched decoding of the same students."""
from __future__ import annotations

import pytest

from conftest import tiny_llama
from eagle_core.decoding.draft import DraftSpec
from eagle_core.decoding.load_budget import (LoadBudget, interpolate, measure_pass_ms, reported_tau, shape_of)
from eagle_core.decoding.presets import tree_presets
from eagle_core.model.target import load_target

# the shape of the measurement (2-core Zen 4, fp32, 256-token prefix): rows -> one-row passes
PASS = {1: 44.0, 6: 1.03 * 44, 26: 2.1 * 44, 64: 3.7 * 44, 128: 6.7 * 44, 192: 10.9 * 44}
OWN = DraftSpec(kind="static", choices=tree_presets()["mc_sim_7b_63"])


def test_interpolation_is_piecewise_linear_and_extrapolates():
    t = {1: 10.0, 3: 14.0, 7: 30.0}
    assert interpolate(t, 1) == 10 and interpolate(t, 2) == 12 and interpolate(t, 5) == 22
    assert interpolate(t, 11) == 46 and interpolate(t, 0) == 10


def test_the_report_gives_the_shipped_heads_tau():
    tau = reported_tau("eagle1")
    assert set(tau) == {3, 6, 26} and 1.5 < tau[3] < tau[6] < tau[26] < 4
    assert reported_tau("eagle3") != tau and reported_tau("eagle1", "/no/such/file.json") == {}


def documented_rate(b: LoadBudget, n: int, rows: int) -> float:
    """The module's formula, written out here from its docstring: B * tau(r) / (pass(B * r) + draft(B, r)), tau
    of no tree 1 (independent of LoadBudget.rate, so a wrong rate or a wrong argmax fails the test below)."""
    tau = 1.0 if rows == 1 else interpolate(reported_tau("eagle1"), rows)
    return n * tau / (interpolate(PASS, n * rows) + b.draft_cost_ms(n, rows))


@pytest.mark.parametrize("draft_ms", [0.0, 5.0, 20.0])
def test_eagle_never_loses_to_plain_decoding_at_any_class_size(draft_ms):
    b = LoadBudget(PASS, {"eagle1": reported_tau("eagle1")}, {3: draft_ms, 6: 1.5 * draft_ms, 26: 4 * draft_ms})
    assert b.rows_for(1, OWN) == 26                                   # one student: today's tree
    sizes = [b.rows_for(n, OWN) for n in range(2, 65)]
    for n, rows in zip(range(2, 65), sizes):
        best = max((1, 3, 6, 26), key=lambda r: documented_rate(b, n, r))
        assert rows == best, (n, rows, best)                          # the formula's best tree, by its own terms
        assert b.rate(n, rows, "eagle1") == pytest.approx(documented_rate(b, n, rows))
    assert sizes == sorted(sizes, reverse=True)                       # the tree shrinks as the class grows
    assert sizes[-1] == 1 and (draft_ms == 20.0 or sizes[0] == 3)     # 64 students: no tree; 2: a chain


def test_a_class_drafts_less_when_drafting_is_dear():
    cheap = LoadBudget(PASS, {"eagle1": reported_tau("eagle1")}, {3: 1.0, 6: 1.5, 26: 6.0})
    dear = LoadBudget(PASS, {"eagle1": reported_tau("eagle1")}, {3: 20.0, 6: 30.0, 26: 90.0})
    assert dear.rows_for(4, OWN) == 1 < cheap.rows_for(4, OWN)
    dear.observe(3, 0.001)                                            # the rounds measure drafting anew
    assert dear.draft_ms[(3, 1)] == pytest.approx(10.5)
    assert LoadBudget(PASS).rows_for(30, DraftSpec(kind="vanilla")) == 1


def test_shapes_of_a_size_are_inside_the_generation_s_own():
    assert shape_of(1, OWN).kind == "vanilla" and shape_of(26, OWN) == OWN
    chain = shape_of(3, OWN)
    assert chain.kind == "static" and chain.max_nodes == 3 and chain.max_depth == 2
    assert shape_of(6, OWN).max_nodes == 6
    for rows in (2, 3, 6, 26):
        assert shape_of(rows, OWN).max_head_entries <= OWN.max_head_entries


def test_pass_costs_are_measured_on_the_target(real_tokenizer):
    """The costs are the target's own passes: a pass made 30 ms slower at 8 rows (injected) measures so."""
    import time
    target = load_target(model=tiny_llama(seed=2), tokenizer=real_tokenizer, device="cpu")
    real = target.forward

    def slow_at_8(ids, *a, **k):
        if ids.shape[1] == 8:
            time.sleep(0.030)
        return real(ids, *a, **k)
    target.forward = slow_at_8
    ms = measure_pass_ms(target, rows=(1, 8, 64), prefix=16, reps=2)
    assert set(ms) == {1, 8, 64} and ms[8] >= 30 and ms[1] < 30 and ms[64] < ms[8]


def test_packed_drafting_is_learned_per_class_size():
    """A round drafts every tree in lockstep (draft_calls.py), so a tree costs less in a larger class: the budget
    keeps what rounds of each power-of-two class size measured, and reads a class it has not seen from the nearest
    smaller one (which costs a tree more: the estimate errs towards plain decoding)."""
    b = LoadBudget(PASS, {"eagle1": reported_tau("eagle1")})
    assert b.draft_cost_ms(8, 3) == 0.0                                # never seen: the next round measures it
    b.observe(3, 0.040, sessions=4)                                   # 4 trees in 40 ms: 10 ms a tree
    b.observe(3, 0.048, sessions=16)                                  # 16 trees in 48 ms: 3 ms a tree
    assert b.draft_cost_ms(4, 3) == pytest.approx(40.0) and b.draft_cost_ms(5, 3) == pytest.approx(50.0)
    assert b.draft_cost_ms(16, 3) == pytest.approx(48.0) and b.draft_cost_ms(30, 3) == pytest.approx(90.0)
    assert b.draft_cost_ms(2, 3) == pytest.approx(20.0)               # below every bucket seen: the smallest
    assert b.draft_cost_ms(30, 1) == 0.0                              # no tree, no drafting
    assert b.rate(30, 3, "eagle1") > LoadBudget(PASS, {"eagle1": reported_tau("eagle1")}, {3: 10.0}).rate(30, 3, "eagle1")
