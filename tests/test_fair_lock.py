"""The model lock: first come first served, a place given up, a turn given back exactly once."""
import threading

import pytest

from eagle_core.serving.fair_lock import FairLock


def queue(lock, n):
    """n tickets requested in this order behind one holder: (holder, [waiters])."""
    holder = lock.request()
    assert holder.is_set()
    return holder, [lock.request() for _ in range(n)]


def test_threads_are_granted_in_request_order():
    lock = FairLock()
    holder = lock.request()
    order, tickets, threads = [], [], []
    for i in range(6):
        asked = threading.Event()

        def worker(i=i, asked=asked):
            t = lock.request()
            tickets.append(t)
            asked.set()
            assert t.wait(10)
            order.append(i)
            lock.release(t)
        th = threading.Thread(target=worker)
        th.start()
        assert asked.wait(10)                 # thread i has its place before thread i+1 asks
        threads.append(th)
    assert [lock.ahead(t) for t in tickets] == [0, 1, 2, 3, 4, 5]
    assert lock.waiting() == 6 and not any(t.is_set() for t in tickets)
    lock.release(holder)
    for th in threads:
        th.join(10)
    assert order == [0, 1, 2, 3, 4, 5]
    assert lock.holds == 7 and not lock.held and lock.waiting() == 0


def test_ahead_counts_the_waiters_before_a_ticket():
    lock = FairLock()
    holder, (a, b, c) = queue(lock, 3)
    assert [lock.ahead(t) for t in (holder, a, b, c)] == [0, 0, 1, 2]
    lock.cancel(a)
    assert [lock.ahead(t) for t in (b, c)] == [0, 1] and lock.waiting() == 2
    lock.release(holder)
    assert b.is_set() and [lock.ahead(t) for t in (b, c)] == [0, 0]


def test_cancel_while_waiting_gives_the_place_up():
    lock = FairLock()
    holder, (a, b) = queue(lock, 2)
    lock.cancel(a)
    assert lock.waiting() == 1 and lock.ahead(b) == 0
    lock.release(holder)
    assert b.is_set() and not a.is_set(), "the next in line is granted, the cancelled one never"
    lock.cancel(a)                                  # again: nothing
    assert lock.held and b.is_set()
    lock.release(b)
    assert not lock.held and lock.holds == 2 and not a.is_set()


def test_cancel_after_grant_releases_once():
    lock = FairLock()
    holder, (a, b) = queue(lock, 2)
    lock.cancel(holder)                             # a granted ticket: gives the turn back
    assert a.is_set() and not b.is_set() and lock.holds == 1
    lock.cancel(holder)                             # a second cancel must not end a's turn
    assert not b.is_set() and lock.held and lock.holds == 1
    lock.release(holder)                            # nor a release of the ended ticket
    assert not b.is_set() and lock.holds == 1
    late = lock.request()
    assert not late.is_set() and lock.ahead(late) == 1, "the lock is a's; late queues behind b"
    lock.release(a)
    assert b.is_set() and not late.is_set()
    lock.release(b)
    lock.release(b)
    assert late.is_set() and lock.holds == 3


@pytest.mark.parametrize("first,second", [("release", "release"), ("release", "cancel"),
                                          ("cancel", "release"), ("cancel", "cancel")])
def test_a_double_give_back_does_not_free_the_lock(first, second):
    """Once the holder's turn is over and the lock is free, a repeated give-back must not free it under
    whoever took it next (a free lock taken at once, with no queue to hand over to)."""
    lock = FairLock()
    t = lock.request()
    getattr(lock, first)(t)
    assert not lock.held
    nxt = lock.request()
    assert nxt.is_set()
    getattr(lock, second)(t)
    assert lock.held, "the second give-back released someone else's turn"
    third = lock.request()
    assert not third.is_set()
    lock.release(nxt)
    assert third.is_set()


def test_release_by_a_non_holder_is_refused():
    lock, other = FairLock(), FairLock()
    holder = lock.request()
    for bad in (None, other.request(), object()):
        with pytest.raises(RuntimeError):
            lock.release(bad)
        with pytest.raises(RuntimeError):
            lock.cancel(bad)
    assert lock.held and holder.is_set() and lock.holds == 0
    waiter = lock.request()
    assert not waiter.is_set()
    lock.release(holder)
    assert waiter.is_set()


def test_hold_takes_and_gives_back_one_turn():
    lock = FairLock()
    with lock.hold() as t:
        assert lock.held and t.is_set()
        w = lock.request()
        assert not w.is_set()
    assert w.is_set() and lock.holds == 1
    lock.release(t)                                  # the context's own ticket: already ended
    assert lock.held
    lock.release(w)
    assert not lock.held and lock.holds == 2
