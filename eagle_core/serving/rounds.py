"""The class is the batch: one engine loop steps every session that wants a cycle together.

A Step, each cycle of a Run, a Race lane or a walkthrough run asks for one cycle of its decoder (`cycle_turn`). The
loop takes every waiting request, first come first served up to ROUND_MAX, and advances them in one round
(decoding/batch.step_together: their trees verified, and new generations' prompts read, in ONE target pass), each
drafting the tree its student set; the teacher may size the class's trees by the load instead (`load_sized`,
decoding/load_budget.py: one student keeps its tree, a class drafts a short chain or none), and each record then
says what its cycle was given (CycleRecord.tree_given).
Sessions join and leave between rounds; a Stop while waiting leaves the queue at once. Other model work ("How can I",
a Race's divergence check) is a job of the loop (`job_turn`): a round runs up to JOBS_PER_ROUND of them, first come
first served, before its pass, so thirty students computing "How can I" at once delay the class's cycles by a
couple of jobs a round, not by thirty. A round holds the model's fair lock, which the few pieces of work outside the
loop (a Lab measurement) still take.

Under ZeroGPU every call runs in a worker of its own and the platform schedules them: no loop there (`cycle_turn`
steps the decoder alone, as before), nor for a Replay (a generation decoded in one go, revealed cycle by cycle).
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import threading
import time

from .gpu import ZERO_GPU
from .turns import CANCELLED, MODEL_LOCK, POLL_S, REPORT_S, model_turn, release_turn

LOG = logging.getLogger("eagle_lens.rounds")
ROUND_MAX = 64          # generations per round at most (a pass of 64 small trees; the rest wait for the next)
JOBS_PER_ROUND = 2      # other pieces of model work per round at most ("How can I"'s record, a round of its payoff)
# After a round, the generations it served come back for their next cycle within a few milliseconds (their
# threads record the cycle and ask again); the loop waits up to this long for them, so that a class keeps
# stepping in one round instead of splitting into two half-rounds that each cost nearly a full pass.
GATHER_S = 0.025
# New generations' prompts read in one round, in prompt tokens at most: a pass costs about its rows on the CPU
# (thirty prompts of ~37 tokens took 4.1 s in one pass), so a class arriving at once is served a few prompts a
# round, the shortest left to read first, and a prompt longer than this is read in chunks over several rounds (as
# vLLM's chunked prefill): the generations already decoding are never held for seconds behind a prompt. 128, not
# 320: with five 730-token prompts among thirty students a round of 320 prompt rows cost ~1.7 s of fp32 rows, and
# every Step waited for about two such rounds (scripts/load_test.py, docs/app.md).
PREFILL_ROWS = 128


@dataclasses.dataclass(eq=False)
class CycleRequest:
    """One cycle of `decoder`, or (decoder None) one job: `job()` run in the loop, its value in `result`."""
    decoder: object
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    record: dict | None = None
    error: BaseException | None = None
    started: bool = False
    job: object = None
    result: object = None
    prompt_rows: int | None = None   # this round's chunk of the decoder's prompt (_select)


class RoundLoop:
    """The engine loop (a daemon thread, started on first use)."""

    def __init__(self, round_max: int = ROUND_MAX, prefill_rows: int = PREFILL_ROWS, load_sized: bool = False):
        self.round_max, self.prefill_rows = round_max, prefill_rows
        # every student drafts the tree they set (the lesson), unless the teacher sizes the class's trees by the
        # load (tabs/teacher.py, app.py --load-sized-trees): the paper's saturation, live
        self.load_sized = load_sized
        self.cv = threading.Condition()
        self.queue: collections.deque[CycleRequest] = collections.deque()
        self.thread: threading.Thread | None = None
        self.budgets: dict[int, object] = {}      # id(target) -> LoadBudget
        self.rounds = 0
        self.last: dict = {}                      # the last round: sessions, rows, seconds (server stats)
        self.served: list = []                    # the last round's decoders (the next round waits for them)

    # ------------------------------------------------------------------ requests
    def submit(self, decoder, job=None) -> CycleRequest:
        req = CycleRequest(decoder, job=job)
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
        """0 when the next round holds this request; else 1 + the requests of its kind before it that the next
        round leaves waiting too."""
        with self.cv:
            if req not in self.queue:
                return 0
            nxt = {id(r) for r in self._select(self.queue)}
            if id(req) in nxt:
                return 0
            before = itertools.takewhile(lambda r: r is not req, self.queue)
            return 1 + sum(1 for r in before if (r.job is None) == (req.job is None) and id(r) not in nxt)

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
            while len({id(r.decoder) for r in self.queue if r.job is None}) < min(expected, self.round_max):
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self.cv.wait(left)
            batch = self._select(self.queue)
            for req in batch:
                self.queue.remove(req)
                req.started = True
            self.served = [r.decoder for r in batch if r.job is None]
            return batch

    def _select(self, queue) -> list[CycleRequest]:
        """The next round's requests: one per decoder, ROUND_MAX generations, at most JOBS_PER_ROUND jobs, first
        come first served, and new generations' prompts up to PREFILL_ROWS tokens in all, the shortest left to read
        first (a longer one in chunks: each request's `prompt_rows`), so that a class's short prompts are not read
        after a few long ones (a long prompt waits at most for the prompts of the class that are shorter)."""
        batch, seen, jobs, prompt_rows = [], set(), 0, 0
        # a stable sort: jobs and generations already decoding keep their order, ahead of the prompts to read
        for req in sorted(queue, key=lambda r: 0 if r.job is not None else prompt_rows_of(r.decoder)):
            if req.job is not None:
                if jobs >= JOBS_PER_ROUND:
                    continue
                jobs += 1
            elif len(batch) - jobs >= self.round_max or id(req.decoder) in seen:
                continue
            else:
                rows = prompt_rows_of(req.decoder)
                take = min(rows, self.prefill_rows - prompt_rows)
                if rows and take <= 0:
                    continue
                req.prompt_rows = take if rows else None
                prompt_rows += take if rows else 0
                seen.add(id(req.decoder))
            batch.append(req)
        return batch

    def _run(self):
        while True:
            batch = self._take()
            ticket = MODEL_LOCK.request()
            ticket.wait()
            try:
                self._serve(batch)
            except Exception:      # the loop outlives any error: said in the server log, every request answered
                LOG.exception("eagle-lens rounds: round %d failed", self.rounds)
                for req in batch:      # (jobs ran first, each in its own try: answered already; a request
                    # back in the queue for its prompt's next chunk is not started, and goes on)
                    if req.started and req.job is None and req.record is None and req.error is None:
                        req.error = RuntimeError("the shared model's round failed (the server log says why); "
                                                 "press Step again")
            finally:
                MODEL_LOCK.release(ticket)
                for req in batch:
                    if req.started:    # (a request back in the queue for its prompt's next chunk waits on)
                        req.done.set()

    def _serve(self, batch: list[CycleRequest]):
        t0 = time.perf_counter()
        for req in batch:
            if req.job is not None:
                try:
                    req.result = req.job()
                except Exception as exc:       # the job's caller raises it; the round goes on
                    req.error = exc
        t1 = time.perf_counter()
        self._round([r for r in batch if r.job is None])
        self.rounds += 1
        self._log(batch, t0, t1)

    def _log(self, batch, t0: float, t1: float):
        """One line per round to EAGLE_LENS_ROUND_LOG (JSON lines), where set: when, jobs and their seconds, the
        pass's sessions, rows and seconds, the whole round's seconds (to read a load test against)."""
        if not ROUND_LOG:
            return
        import json
        line = dict(t=round(t0, 4), jobs=sum(r.job is not None for r in batch), jobs_s=round(t1 - t0, 4),
                    round_s=round(time.perf_counter() - t0, 4), **self.last)
        with open(ROUND_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def _round(self, batch: list[CycleRequest]):
        """One cycle of every generation in `batch`, as one transaction: if anything in the round fails (the
        shapes, drafting, the shared pass, a generation's acceptance), every generation is put back as it was
        (EagleDecoder.checkpoint / restore: no half-appended KV entries, no head-cache entries twice, no cycle
        committed for a record the page never gets), then each steps alone: the failing one gets its error, the
        others their cycle."""
        from ..decoding.batch import step_together
        live = [r for r in batch if not r.decoder.done]
        for r in batch:
            if r.decoder.done:
                r.error = RuntimeError("generation already finished")
        if not live:
            self.last = {"sessions": 0}
            return
        decs = [r.decoder for r in live]
        saved = [d.checkpoint() for d in decs]
        try:
            records, info = step_together(decs, self._shapes(decs), [r.prompt_rows for r in live])
            dicts = [dataclasses.asdict(rec) if rec is not None else None for rec in records]
        except Exception as exc:
            LOG.warning("eagle-lens rounds: a round of %d generations failed (%r); each steps alone", len(live), exc)
            for d, st in zip(decs, saved):
                d.restore(st)
            for r, st in zip(live, saved):
                try:
                    r.record = dataclasses.asdict(r.decoder.step())
                except Exception as e:
                    r.decoder.restore(st)
                    r.error = e
            self.last = {"sessions": len(live), "error": repr(exc)[:200]}
            return
        chunked = [r for r, rec in zip(live, dicts) if rec is None]
        for r, rec in zip(live, dicts):
            r.record = rec
        if chunked:          # a prompt read in part: its request goes on, first in line, in the next round
            with self.cv:
                for r in chunked:
                    r.started = False
                self.queue.extendleft(reversed(chunked))
        self.last = {"sessions": info.sessions, "rows": info.rows, "seconds": round(info.seconds, 4),
                     "draft_seconds": round(info.draft_seconds, 4), "prefills": info.prefills}
        budget = self.budgets.get(id(decs[0].target))
        if budget is not None:
            try:
                budget.observe_round(records, info)
            except Exception:                  # the cycles are committed and answered; the model of costs waits
                LOG.exception("eagle-lens rounds: the load budget could not read round %d", self.rounds)

    def _shapes(self, decs) -> list:
        """Each generation's tree for this round: its own, or (the teacher's choice, `load_sized`) sized by how
        many are in it (load_budget.py)."""
        from ..decoding.load_budget import round_shapes
        if not self.load_sized or sum(1 for d in decs if d.cycles) <= 1:
            return [None] * len(decs)
        return round_shapes(self.budget(decs[0].target), decs)

    def budget(self, target):
        """The target's LoadBudget, its pass costs measured once (a few seconds, while holding the model)."""
        from ..decoding.load_budget import new_budget
        if id(target) not in self.budgets:
            self.budgets[id(target)] = new_budget(target)
        return self.budgets[id(target)]


def prompt_rows_of(decoder) -> int:
    """The prompt tokens a generation still has to read (0 once it has)."""
    return getattr(decoder, "prompt_left", 0)


LOOP = RoundLoop(load_sized=os.environ.get("EAGLE_LENS_LOAD_SIZED_TREES", "") not in ("", "0"))
ROUND_LOG = os.environ.get("EAGLE_LENS_ROUND_LOG", "")


def job_turn(job, waiting=None, cancel: threading.Event | None = None):
    """Generator: `job()` (a bounded piece of model work: "How can I", a divergence check) run by the engine loop
    in its next round with room for it, yielding `waiting(ahead, seconds)` every REPORT_S meanwhile; returns its
    value (raises what it raised), or CANCELLED when `cancel` was set while it waited. Under ZeroGPU it takes a
    model turn of its own."""
    if ZERO_GPU:
        ticket = yield from model_turn(waiting, cancel=cancel)
        if ticket is CANCELLED:
            return CANCELLED
        try:
            return job()
        finally:
            release_turn(ticket)
    req = LOOP.submit(None, job=job)
    if (yield from _wait(req, waiting, cancel, REPORT_S)) is CANCELLED:
        return CANCELLED
    return req.result


def run_job(job):
    """`job()` in the engine loop, blocking (no queue position shown)."""
    turn = job_turn(job)
    try:
        while True:
            next(turn)
    except StopIteration as end:
        return end.value


def cycle_turn(dec, waiting=None, cancel: threading.Event | None = None, quiet_s: float = REPORT_S):
    """Generator: one cycle of `dec` in the next round it fits in; yields `waiting(ahead, seconds)` once it has
    waited `quiet_s` and every REPORT_S after; returns [record dict] (or [] when the decoder is done), or CANCELLED
    when `cancel` was set while it waited. A Replay, or any decoder under ZeroGPU, takes a model turn of its own
    as before."""
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
    if (yield from _wait(req, waiting, cancel, quiet_s)) is CANCELLED:
        return CANCELLED
    return [req.record]


def _wait(req: CycleRequest, waiting, cancel: threading.Event | None, quiet_s: float):
    """Generator: wait for `req`'s round, yielding `waiting(ahead, seconds)` once it has waited `quiet_s` and
    every REPORT_S after; returns CANCELLED when `cancel` withdrew it from the queue, else None (raises what the
    round raised for it)."""
    t0 = time.perf_counter()
    note_at = t0 + quiet_s
    try:
        while True:
            # queued, Stop can still withdraw it: look every POLL_S; once in a round, only wake for its end or
            # the next note (thirty waiting students polling cost the round's thread the GIL)
            now = time.perf_counter()
            if req.done.wait(POLL_S if not req.started else max(POLL_S, note_at - now)):
                break
            if cancel is not None and cancel.is_set() and LOOP.withdraw(req):
                return CANCELLED
            now = time.perf_counter()
            if waiting is not None and now >= note_at:
                note_at = now + REPORT_S    # behind the round in progress, or in one that waits for the model
                yield waiting((0 if req.started else LOOP.ahead(req)) + MODEL_LOCK.waiting(), now - t0)
    except BaseException:                  # the page went away while waiting: leave the queue
        LOOP.withdraw(req)
        raise
    if req.error is not None:
        raise req.error
    return None
