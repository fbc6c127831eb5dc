"""SharedResults: a class asking the same thing computes it once (serving/shared.py)."""
from __future__ import annotations

import threading

from eagle_core.serving.shared import DONE, MINE, WAIT, SharedResults


def test_first_asker_computes_the_others_wait_then_read():
    s = SharedResults(size=2)
    assert s.claim("a") == (MINE, None)
    kind, ev = s.claim("a")
    assert kind == WAIT and not ev.is_set()
    s.finish("a", {"x": 1})
    assert ev.is_set() and s.claim("a") == (DONE, {"x": 1})
    assert (s.computed, s.shared) == (1, 2)


def test_a_failure_is_not_kept_and_the_next_asker_computes():
    s = SharedResults()
    s.claim("a")
    kind, ev = s.claim("a")
    s.finish("a", ok=False)
    assert ev.is_set() and s.claim("a") == (MINE, None)


def test_only_the_last_few_are_kept():
    s = SharedResults(size=2)
    for k in "abc":
        s.claim(k)
        s.finish(k, k)
    assert s.claim("a") == (MINE, None) and s.claim("c") == (DONE, "c")


def test_many_threads_one_computation():
    s, calls, out = SharedResults(), [], []

    def ask():
        while True:
            kind, v = s.claim("k")
            if kind == DONE:
                out.append(v)
                return
            if kind == WAIT:
                v.wait()
                continue
            calls.append(1)
            s.finish("k", 42)

    ts = [threading.Thread(target=ask) for _ in range(20)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert calls == [1] and out == [42] * 20          # one computed it, all twenty read it
