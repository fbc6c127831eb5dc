"""A first-come-first-served lock for one model shared by many sessions (a classroom on one machine).

Every piece of model work (one draft/verify cycle, one "How can I" computation) takes the lock for just that
piece, so a long Run is many short holds: another session's Step queues behind at most the cycle in progress
and the ones already waiting, never behind a whole generation. Python's own Lock does not promise arrival
order; this one hands the model to waiters strictly in the order they asked, and can say how many are ahead.
"""
from __future__ import annotations

import collections
import threading
from contextlib import contextmanager


class FairLock:
    def __init__(self):
        self._mutex = threading.Lock()
        self._waiters: collections.deque[threading.Event] = collections.deque()
        self._held = False
        self.holds = 0              # completed holds (the server's stats)

    def waiting(self) -> int:
        with self._mutex:
            return len(self._waiters)

    def request(self) -> threading.Event:
        """Join the queue; the returned ticket is set once the lock is ours (at once when it was free). Wait on
        it in slices to report the queue position meanwhile (`ahead`); `cancel` it if the waiter goes away."""
        ticket = threading.Event()
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                ticket.set()
            else:
                self._waiters.append(ticket)
        return ticket

    def ahead(self, ticket: threading.Event) -> int:
        """Waiters before this ticket (0 when it holds the lock or is next)."""
        with self._mutex:
            return next((i for i, w in enumerate(self._waiters) if w is ticket), 0)

    def cancel(self, ticket: threading.Event):
        """Leave the queue; a ticket that was already granted releases the lock."""
        with self._mutex:
            if ticket in self._waiters:
                self._waiters.remove(ticket)
                return
        if ticket.is_set():
            self.release()

    def acquire(self):
        """Block until the lock is ours."""
        self.request().wait()

    def release(self):
        with self._mutex:
            self.holds += 1
            if self._waiters:
                self._waiters.popleft().set()    # handed over: stays held
            else:
                self._held = False

    @contextmanager
    def hold(self):
        self.acquire()
        try:
            yield
        finally:
            self.release()
