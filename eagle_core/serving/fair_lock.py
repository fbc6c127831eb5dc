"""A first-come-first-served lock for one model shared by many sessions (a classroom on one machine).

Every piece of model work (one draft/verify cycle, one "How can I" computation) takes the lock for just that
piece, so a long Run is many short holds: another session's Step queues behind at most the cycle in progress
and the ones already waiting, never behind a whole generation. Python's own Lock does not promise arrival
order; this one hands the model to waiters strictly in the order they asked, and can say how many are ahead.

Ownership is by ticket: `request` returns a Ticket (a threading.Event, set once the lock is the ticket's), and
only that ticket gives the turn back. A ticket ends exactly once: `release(ticket)` and `cancel(ticket)` are
the same operation and safe on a ticket in any state (a waiting one leaves the queue, the granted one hands the
lock to the next waiter, an ended one is left alone), so a second cancel never gives away someone else's turn.
A ticket this lock did not issue (or none at all) is refused with a RuntimeError: releasing needs the owner.
"""
from __future__ import annotations

import collections
import threading
from contextlib import contextmanager

WAITING, GRANTED, ENDED = "waiting", "granted", "ended"


class Ticket(threading.Event):
    """One place in a FairLock's queue. `wait`/`is_set` as an Event (set once granted); `state` is WAITING,
    GRANTED (the lock is this ticket's) or ENDED (released or cancelled; it never comes back)."""

    def __init__(self, lock: "FairLock"):
        super().__init__()
        self.lock = lock
        self.state = WAITING


class FairLock:
    def __init__(self):
        self._mutex = threading.Lock()
        self._waiters: collections.deque[Ticket] = collections.deque()
        self._owner: Ticket | None = None
        self.holds = 0              # completed holds (the server's stats)

    @property
    def _held(self) -> bool:
        return self._owner is not None

    held = _held

    def waiting(self) -> int:
        with self._mutex:
            return len(self._waiters)

    def request(self) -> Ticket:
        """Join the queue; the returned ticket is set once the lock is ours (at once when it was free). Wait on
        it in slices to report the queue position meanwhile (`ahead`); `cancel` it if the waiter goes away,
        `release` it when the work is done (either is right in either state)."""
        ticket = Ticket(self)
        with self._mutex:
            if self._owner is None and not self._waiters:
                self._grant(ticket)
            else:
                self._waiters.append(ticket)
        return ticket

    def ahead(self, ticket: Ticket) -> int:
        """Waiters before this ticket (0 when it holds the lock or is next)."""
        with self._mutex:
            return next((i for i, w in enumerate(self._waiters) if w is ticket), 0)

    def release(self, ticket: Ticket | None = None):
        """End `ticket`: a waiting ticket gives up its place, the granted one hands the lock to the next waiter
        (or frees it), an ended one does nothing. Refuses (RuntimeError) a ticket of another lock, or none."""
        if not isinstance(ticket, Ticket) or ticket.lock is not self:
            raise RuntimeError("FairLock.release needs the ticket this lock issued to the caller "
                               f"(got {type(ticket).__name__}); only the holder's ticket gives the lock back")
        with self._mutex:
            if ticket.state == WAITING:
                self._waiters.remove(ticket)
                ticket.state = ENDED
            elif ticket.state == GRANTED:
                assert self._owner is ticket, "a granted ticket that does not own the lock"
                ticket.state = ENDED
                self._owner = None
                self.holds += 1
                if self._waiters:
                    self._grant(self._waiters.popleft())     # handed over: stays held

    cancel = release    # leave the queue, or give back a turn already granted; a no-op once ended

    def acquire(self) -> Ticket:
        """Block until the lock is ours; returns the ticket to `release`."""
        ticket = self.request()
        try:
            ticket.wait()
        except BaseException:
            self.release(ticket)
            raise
        return ticket

    @contextmanager
    def hold(self):
        ticket = self.acquire()
        try:
            yield ticket
        finally:
            self.release(ticket)

    def _grant(self, ticket: Ticket):     # under the mutex
        ticket.state = GRANTED
        self._owner = ticket
        ticket.set()
