"""The one road through the engine (eagle_core/decoding/drive.py): when a generation's loop stops, what a caller
sees, and that no other loop steps a generation beside it."""
from __future__ import annotations

import ast
import os
import threading

from eagle_core.decoding.drive import CANCELLED, FINISHED, STOPPED, alone, cycles, drive, finish, outcome
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder, generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Counter:
    """A generation of `n` cycles whose step returns the cycle's number."""

    def __init__(self, n):
        self.n, self.steps = n, 0

    @property
    def done(self):
        return self.steps >= self.n

    def step(self):
        self.steps += 1
        return self.steps


def test_drive_runs_to_the_end_and_yields_what_each_returns():
    gen = Counter(4)
    seen = list(drive(gen, each=lambda got: got[0] if got[0] % 2 == 0 else None))
    assert seen == [2, 4] and gen.steps == 4
    assert list(cycles(Counter(3))) == [1, 2, 3]
    assert finish(Counter(5)).steps == 5
    assert outcome(drive(Counter(2))) == FINISHED


def test_notes_of_a_waiting_turn_come_before_its_cycle():
    def noisy(gen, waiting, cancel):
        yield waiting(0, 0.5)
        return [gen.step()]

    out = list(drive(Counter(2), noisy, waiting=lambda ahead, s: f"note {s}", each=lambda got: f"cycle {got[0]}"))
    assert out == ["note 0.5", "cycle 1", "note 0.5", "cycle 2"]


def test_a_stop_ends_the_loop_before_the_next_cycle():
    stop = threading.Event()
    gen = Counter(10)

    def each(got):
        if got[0] == 3:
            stop.set()

    assert outcome(drive(gen, cancel=stop, each=each)) == STOPPED
    assert gen.steps == 3


def test_a_turn_that_runs_nothing_ends_the_loop_and_says_why():
    def cancelled(gen, waiting, cancel):
        return CANCELLED
        yield  # noqa: unreachable

    gen = Counter(3)
    assert outcome(drive(gen, cancelled)) == STOPPED and gen.steps == 0

    def empty_after_done(gen, waiting, cancel):     # someone else finished it meanwhile
        gen.steps = gen.n
        return []
        yield  # noqa: unreachable

    assert outcome(drive(Counter(3), empty_after_done)) == FINISHED


def test_cycles_of_a_decoder_are_its_generation(tiny_target, tiny_random_head):
    cfg = DecodeConfig(draft="static", max_new_tokens=12)
    ids = tiny_target.render_prompt("How can I")
    recs = list(cycles(EagleDecoder(tiny_target, tiny_random_head, cfg, ids)))
    ref = generate(tiny_target, tiny_random_head, cfg, ids)
    assert [t for r in recs for t in r.new_tokens] == ref.token_ids
    assert [r.cycle for r in recs] == list(range(len(recs)))
    assert next(alone(Counter(1)), None) is None     # alone never waits: its generator returns at once


def _stepping_loops(path: str) -> list[int]:
    """Lines of `while` loops in `path` that step a generation until it is done (`while not x.done`,
    `while not all(d.done ...)`)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.While) and isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):
            if any(isinstance(n, ast.Attribute) and n.attr == "done" for n in ast.walk(node.test)):
                lines.append(node.lineno)
    return lines


def test_no_loop_steps_a_generation_beside_drive():
    found = {}
    for top in ("eagle_core", "tabs", "scripts", "views", "app.py"):
        base = os.path.join(ROOT, top)
        files = [base] if base.endswith(".py") else [os.path.join(d, f) for d, _, fs in os.walk(base)
                                                    for f in fs if f.endswith(".py")]
        for path in files:
            rel = os.path.relpath(path, ROOT)
            if rel == os.path.join("eagle_core", "decoding", "drive.py"):
                continue
            lines = _stepping_loops(path)
            if lines:
                found[rel] = lines
    assert not found, f"loops that step a generation outside decoding/drive.py (use drive/cycles/finish): {found}"
    # the check itself sees such a loop
    probe = os.path.join(ROOT, "tests", "test_drive.py")
    assert _stepping_loops(probe) == [], "this file must hold no stepping loop of its own"


def test_the_check_finds_a_stepping_loop(tmp_path):
    p = tmp_path / "loop.py"
    p.write_text("def f(dec):\n    while not dec.done:\n        dec.step()\n"
                 "def g(decs):\n    while not all(d.done for d in decs):\n        pass\n")
    assert _stepping_loops(str(p)) == [2, 5]
