"""Model turns: one model, many sessions. Every piece of model work (one cycle, one "How can I") takes the
first-come-first-served lock for just that piece, so Runs interleave cycle by cycle with everyone's Steps.
Under ZeroGPU each call runs in a worker of its own and the platform schedules them (no lock here)."""
from __future__ import annotations

import threading
import time
from contextlib import nullcontext

from ..decoding.drive import CANCELLED  # noqa: F401  (model_turn's answer when `cancel` was set while waiting)
from .fair_lock import FairLock
from .gpu import ZERO_GPU

MODEL_LOCK = FairLock()
POLL_S, REPORT_S = 0.05, 0.4


def model_turn(waiting=None, needs_lock: bool = True, cancel: threading.Event | None = None):
    """Generator: wait for the model's turn (first come, first served), yielding `waiting(ahead, seconds)` every
    REPORT_S meanwhile; returns the ticket to `release_turn` after one bounded piece of work, or CANCELLED when
    `cancel` (a Stop) was set while waiting: a stopped Run does not wait through the queue."""
    if ZERO_GPU or not needs_lock:
        return None
    ticket = MODEL_LOCK.request()
    t0 = last = time.perf_counter()
    try:
        while not ticket.wait(POLL_S):
            if cancel is not None and cancel.is_set():
                MODEL_LOCK.cancel(ticket)
                return CANCELLED
            if waiting is not None and time.perf_counter() - last >= REPORT_S:
                last = time.perf_counter()
                yield waiting(MODEL_LOCK.ahead(ticket), last - t0)
    except BaseException:           # the page went away while waiting: leave the queue
        MODEL_LOCK.cancel(ticket)
        raise
    return ticket


def release_turn(ticket):
    """Give a granted turn back (a no-op for None, and for a ticket already given back)."""
    if ticket is not None and ticket is not CANCELLED:
        MODEL_LOCK.cancel(ticket)


def one_turn():
    """The model's turn for a piece of work that shows no queue position (blocking)."""
    return nullcontext() if ZERO_GPU else MODEL_LOCK.hold()


def queue_note(ahead: int, waited: float) -> str:
    who = "1 request" if ahead == 0 else f"{ahead + 1} requests"
    return f"⏳ Waiting for the shared model: {who} ahead of you, {waited:.0f} s so far (one cycle each, in turn)."
