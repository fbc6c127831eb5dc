"""The server's session store and model turns (eagle_core/serving): eviction at the cap, locking, claims, and a
precomputed generation that takes the model one cycle per turn."""
import threading
import time

import pytest

from eagle_core.serving import generation, turns
from eagle_core.serving.errors import Busy
from eagle_core.serving.sessions import SessionStore


def states(store, n):
    out = []
    for _ in range(n):
        st = {}
        store.session(st)
        out.append(st)
        time.sleep(0.002)            # distinct "used" times: the first is the least recently used
    return out


def test_the_callers_own_entry_is_found_before_anything_is_evicted():
    store = SessionStore(max_sessions=3, idle_timeout=1e9)
    sts = states(store, 3)
    oldest = store.entries[sts[0]["sid"]]
    oldest.decoder = "a decoder with a KV cache"
    again = store.session(sts[0])                 # at the cap, the least recently used asks again
    assert again is oldest and again.decoder == "a decoder with a KV cache"
    assert set(store.entries) == {s["sid"] for s in sts}


def test_running_sessions_are_never_evicted():
    store = SessionStore(max_sessions=3, idle_timeout=1e9)
    sts = states(store, 3)
    ents = [store.entries[s["sid"]] for s in sts]
    assert all(store.claim(e, "run") for e in ents)
    with pytest.raises(Busy, match="all 3 sessions are decoding"):
        store.session({})                         # a fourth page: told, nobody's Run loses its decoder
    assert set(store.entries) == {s["sid"] for s in sts}
    assert not any(e.stop.is_set() for e in ents)
    store.release(ents[1])                        # one idle: it makes room, the running ones stay
    new = {}
    store.session(new)
    assert sts[1]["sid"] not in store.entries and ents[1].stop.is_set()
    assert {sts[0]["sid"], sts[2]["sid"], new["sid"]} == set(store.entries)


class BlockingHash:
    """A session's `hash` whose comparison blocks until `go` is set: a request caught in the middle of iterating
    the session table (drop_hash compares every entry's hash while it holds the store's lock)."""

    def __init__(self):
        self.comparing, self.go = threading.Event(), threading.Event()

    def __eq__(self, other):
        self.comparing.set()
        assert self.go.wait(5)
        return False

    __hash__ = object.__hash__


def test_drop_waits_for_the_lock():
    """gr.State's delete callback (SessionStore.drop) changes the table only under the store's lock: while another
    request iterates the table (here drop_hash, stopped in the middle of its loop), a drop blocks, then frees the
    entry and stops its Run. A drop that does not take the lock pops the entry under the iteration (which then
    raises "dictionary changed size during iteration") and fails here."""
    store = SessionStore(max_sessions=4, idle_timeout=1e9)
    a, b = states(store, 2)
    blocker = store.entries[a["sid"]].hash = BlockingHash()   # the first entry drop_hash compares
    ent_b = store.entries[b["sid"]]
    errors = []

    def run(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:     # noqa: BLE001 -- reported by the test
            errors.append(exc)
    iterating = threading.Thread(target=run, args=(store.drop_hash, "another-tab"))
    iterating.start()
    assert blocker.comparing.wait(5), "drop_hash never reached the entries"
    dropping = threading.Thread(target=run, args=(store.drop, b["sid"]))
    dropping.start()
    dropping.join(0.2)
    try:
        assert dropping.is_alive(), "drop returned while another request iterated the table under the lock"
        assert b["sid"] in store.entries and not ent_b.stop.is_set()
    finally:
        blocker.go.set()
        iterating.join(5)
        dropping.join(5)
    assert not errors, errors
    assert b["sid"] not in store.entries and a["sid"] in store.entries
    assert ent_b.stop.is_set() and not ent_b.playing.is_set()


def test_a_session_runs_one_thing_at_a_time():
    store = SessionStore(max_sessions=4, idle_timeout=1e9)
    (st,) = states(store, 1)
    ent = store.entries[st["sid"]]
    assert store.claim(ent, "step")
    assert not store.claim(ent, "step") and not store.claim(ent, "run")   # a double click, a Run during a Step
    store.release(ent)
    assert store.claim(ent, "run")


def test_sweep_frees_idle_sessions_and_their_play_flags():
    store = SessionStore(max_sessions=4, idle_timeout=10)
    a, b = states(store, 2)
    ea, eb = store.entries[a["sid"]], store.entries[b["sid"]]
    ea.playing.set()
    store.claim(eb, "run")
    assert store.sweep(time.time() + 60) == 1     # the running one stays
    assert a["sid"] not in store.entries and not ea.playing.is_set() and b["sid"] in store.entries


class FakeDecoder:
    def __init__(self, n):
        self.n, self.cycles = n, []

    @property
    def done(self):
        return len(self.cycles) >= self.n

    def step(self):
        assert turns.MODEL_LOCK._held, "a cycle must run inside a model turn"
        self.cycles.append({"cycle": len(self.cycles), "new_tokens": [1]})
        time.sleep(0.01)
        return self.cycles[-1]


def test_a_precomputed_generation_takes_one_turn_per_cycle(monkeypatch):
    """EAGLE_LENS_PRECOMPUTE=1 decodes a generation in one go, but the model lock is held one cycle at a time,
    so another session's Step is served in between (the lock's promise)."""
    monkeypatch.setattr(generation, "new_decoder", lambda cfg, shift, prompt: FakeDecoder(6))
    monkeypatch.setattr(generation, "ZERO_GPU", False)
    holds0 = turns.MODEL_LOCK.holds
    served = []

    def other_session():
        time.sleep(0.015)
        with turns.one_turn():
            served.append(turns.MODEL_LOCK.holds - holds0)
    th = threading.Thread(target=other_session)
    th.start()
    recs = generation.precomputed(None, "shifted", "hi")
    th.join(5)
    assert len(recs) == 6 and turns.MODEL_LOCK.holds - holds0 == 7      # six cycles and the other session
    assert served and served[0] < 6, "the other session waited for the whole generation"


def test_advance_never_spins_on_a_missing_decoder():
    assert generation.advance(None, 3) == []
    dec = FakeDecoder(2)
    with turns.one_turn():
        assert len(generation.advance(dec, 5)) == 2
        assert generation.advance(dec, 1) == []
