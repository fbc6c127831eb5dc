"""One computation for a class that asks the same thing: results kept by their inputs, and a second asker waiting
for the first one's result instead of computing it again.

Only for results that are a function of their key (deterministic: "How can I" at T = 0 is the target's and the
heads' top tokens and greedy EAGLE cycles). Thirty students pressing Compute on "How can I" asked the engine for
thirty identical records and payoffs (each a few dozen cycles); with this the engine computes one and the others
read it. A failed computation is not kept: the next asker computes it.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

DONE, WAIT, MINE = "done", "wait", "mine"


class SharedResults:
    def __init__(self, size: int = 16):
        self.size = size
        self.done: OrderedDict = OrderedDict()
        self.running: dict = {}
        self.lock = threading.Lock()
        self.computed = self.shared = 0          # how many were computed, how many were read or waited for

    def claim(self, key) -> tuple[str, object]:
        """(DONE, result) when it is known; (WAIT, event) while another asker computes it (event.set() when that
        ends, then claim again); (MINE, None): compute it, then finish(key, result)."""
        with self.lock:
            if key in self.done:
                self.done.move_to_end(key)
                self.shared += 1
                return DONE, self.done[key]
            if key in self.running:
                self.shared += 1
                return WAIT, self.running[key]
            self.running[key] = threading.Event()
            return MINE, None

    def finish(self, key, result=None, ok: bool = True) -> None:
        """The claimed computation ended (ok False: it failed; nothing is kept and the waiters compute it)."""
        with self.lock:
            ev = self.running.pop(key, None)
            if ok:
                self.computed += 1
                self.done[key] = result
                self.done.move_to_end(key)
                while len(self.done) > self.size:
                    self.done.popitem(last=False)
        if ev is not None:
            ev.set()
