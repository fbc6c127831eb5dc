"""The class is the batch: one engine loop steps every session that wants a cycle together.

A Step, each cycle of a Run, a Race lane or a walkthrough run asks for one cycle of its decoder (`cycle_turn`). The
loop takes every waiting request, first come first served up to ROUND_MAX, and advances them in one round
(decoding/batch.step_together: their trees verified in ONE target pass), with trees sized by the load
(decoding/load_budget.py: one student keeps its tree, a class drafts a short chain or none). Sessions join and leave
between rounds; a Stop while waiting leaves the queue at once. A round holds the model's fair lock like any other
piece of model work ("How can I", a replayed generation), so those interleave with rounds first come first served.

Under ZeroGPU every call runs in a worker of its own and the platform schedules them: no loop there (`cycle_turn`
steps the decoder alone, as before), nor for a Replay (a generation decoded in one go, revealed cycle by cycle).
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import time

from .gpu import ZERO_GPU
from .turns import CANCELLED, MODEL_LOCK, POLL_S, REPORT_S, model_turn, release_turn

ROUND_MAX = 64          # generations per round at most (a pass of 64 small trees; the rest wait for the next)
# After a round, the generations it served come back for their next cycle within a few milliseconds (their
# threads record the cycle and ask again); the loop waits up to this long for them, so that a class keeps
# stepping in one round instead of splitting into two half-rounds that each cost nearly a full pass.
GATHER_S = 0.025


@dataclasses.dataclass(eq=False)
class CycleRequest:
    decoder: object
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    record: dict | None = None
    error: BaseException | None = None
    started: bool = False


class RoundLoop:
    """The engine loop (a daemon thread, started on first use)."""

    def __init__(self, round_max: int = ROUND_MAX):
        self.round_max = round_max
        self.cv = threading.Condition()
        self.queue: collections.deque[CycleRequest] = collections.deque()
        self.thread: threading.Thread | None = None
        self.budgets: dict[int, object] = {}      # id(target) -> LoadBudget
        self.rounds = 0
        self.last: dict = {}                      # the last round: sessions, rows, seconds (server stats)
        self.served: list = []                    # the last round's decoders (the next round waits for them)

    # ------------------------------------------------------------------ requests
    def submit(self, decoder) -> CycleRequest:
        req = CycleRequest(decoder)
        with self.cv:
            self.queue.append(req)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="eagle-lens-rounds", daemon=True)
                self.thread.start()
            self.cv.notify()
        return req

    def withdraw(self, req: CycleRequest) -> bool:
        """Leave the queue (a Stop while waiting); False when the request is already in a round."""
        with self.cv:
            if req.started:
                return False
            try:
                self.queue.remove(req)
            except ValueError:
                return False
            return True

    def ahead(self, req: CycleRequest) -> int:
        """Requests before this one that the next round will not hold (0: in the next round)."""
        with self.cv:
            idx = next((i for i, r in enumerate(self.queue) if r is req), 0)
        return max(0, idx - self.round_max + 1)

    def waiting(self) -> int:
        with self.cv:
            return len(self.queue)

    # ------------------------------------------------------------------ the loop
    def _take(self) -> list[CycleRequest]:
        with self.cv:
            while not self.queue:
                self.cv.wait()
            # the last round's generations that are not done: wait briefly for those still to ask again
            expected = sum(1 for d in self.served if not d.done)
            deadline = time.perf_counter() + GATHER_S
            while len({id(r.decoder) for r in self.queue}) < min(expected, self.round_max):
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self.cv.wait(left)
            batch, seen = [], set()
            for req in list(self.queue):          # one request per decoder per round, first come first served
                if len(batch) >= self.round_max:
                    break
                if id(req.decoder) in seen:
                    continue
                seen.add(id(req.decoder))
                self.queue.remove(req)
                req.started = True
                batch.append(req)
            self.served = [r.decoder for r in batch]
            return batch

    def _run(self):
        while True:
            batch = self._take()
            ticket = MODEL_LOCK.request()
            ticket.wait()
            try:
                self._round(batch)
            finally:
                MODEL_LOCK.release(ticket)
                for req in batch:
                    req.done.set()

    def _round(self, batch: list[CycleRequest]):
        from ..decoding.batch import step_together
        live = [r for r in batch if not r.decoder.done]
        for r in batch:
            if r.decoder.done:
                r.error = RuntimeError("generation already finished")
        if not live:
            return
        decs = [r.decoder for r in live]
        shapes = self._shapes(decs)
        try:
            records, info = step_together(decs, shapes)
        except Exception as exc:               # one bad generation must not take the class down: each alone
            for r in live:
                try:
                    r.record = dataclasses.asdict(r.decoder.step())
                except Exception as e:
                    r.error = e
            self.last = {"sessions": len(live), "error": repr(exc)[:200]}
            return
        for r, rec in zip(live, records):
            r.record = dataclasses.asdict(rec)
        self.rounds += 1
        self.last = {"sessions": info.sessions, "rows": info.rows, "seconds": round(info.seconds, 4),
                     "draft_seconds": round(info.draft_seconds, 4)}
        budget = self.budgets.get(id(decs[0].target))
        if budget is not None:
            budget.observe_round(records, info)

    def _shapes(self, decs) -> list:
        """Each generation's tree for this round, sized by how many are in it (load_budget.py)."""
        from ..decoding.load_budget import round_shapes
        if sum(1 for d in decs if d.cycles) <= 1:
            return [None] * len(decs)
        return round_shapes(self.budget(decs[0].target), decs)

    def budget(self, target):
        """The target's LoadBudget, its pass costs measured once (a few seconds, while holding the model)."""
        from ..decoding.load_budget import new_budget
        if id(target) not in self.budgets:
            self.budgets[id(target)] = new_budget(target)
        return self.budgets[id(target)]


LOOP = RoundLoop()


def cycle_turn(dec, waiting=None, cancel: threading.Event | None = None):
    """Generator: one cycle of `dec` in the next round it fits in; yields `waiting(ahead, seconds)` every REPORT_S
    meanwhile; returns [record dict] (or [] when the decoder is done), or CANCELLED when `cancel` was set while
    it waited. A Replay, or any decoder under ZeroGPU, takes a model turn of its own as before."""
    from ..decoding.engine import EagleDecoder
    if ZERO_GPU or not isinstance(dec, EagleDecoder):
        ticket = yield from model_turn(waiting, needs_lock=not getattr(dec, "replayed", False), cancel=cancel)
        if ticket is CANCELLED:
            return CANCELLED
        try:
            if dec is None or dec.done or (cancel is not None and cancel.is_set()):
                return []
            rec = dec.step()
            return [rec if isinstance(rec, dict) else dataclasses.asdict(rec)]
        finally:
            release_turn(ticket)
    if dec.done:
        return []
    req = LOOP.submit(dec)
    t0 = last = time.perf_counter()
    try:
        while not req.done.wait(POLL_S):
            if cancel is not None and cancel.is_set() and LOOP.withdraw(req):
                return CANCELLED
            if waiting is not None and time.perf_counter() - last >= REPORT_S:
                last = time.perf_counter()     # behind the round in progress, or in one that waits for the model
                yield waiting((0 if req.started else LOOP.ahead(req)) + MODEL_LOCK.waiting(), last - t0)
    except BaseException:                  # the page went away while waiting: leave the queue
        LOOP.withdraw(req)
        raise
    if req.error is not None:
        raise req.error
    return [req.record]
