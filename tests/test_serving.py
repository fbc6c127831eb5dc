"""The server's session store and model turns (eagle_core/serving): eviction at the cap, locking, claims, and a
precomputed generation that takes the model one cycle per turn."""
import threading
import time

import pytest

from eagle_core.serving import generation, turns
from eagle_core.serving.errors import Busy, UserError
from eagle_core.decoding.engine import DecodeConfig
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


# ----------------------------------------------------------------------------- staying bounded (issue 37, point 5)
def test_at_the_cap_an_entry_without_a_decoder_makes_room_first():
    """Every page load and Play makes an entry; at the cap one of those (idle, no decoder) goes before a student's
    decoder, even when the student's is the least recently used; only when every idle entry holds a decoder does
    the least recently used decoder make room."""
    store = SessionStore(max_sessions=3, idle_timeout=1e9)
    sts = states(store, 3)
    student = store.entries[sts[0]["sid"]]
    student.decoder = "a student's decoder with its KV cache"      # the least recently used entry
    store.entries[sts[2]["sid"]].decoder = "another student's"
    new = {}
    store.session(new)
    assert sts[0]["sid"] in store.entries and not student.stop.is_set(), "a student's decoder was evicted"
    assert sts[1]["sid"] not in store.entries                     # the page load without a decoder went
    store.entries[new["sid"]].decoder = "a third"
    store.session({})                                             # all idle entries hold decoders: LRU goes
    assert sts[0]["sid"] not in store.entries and student.stop.is_set()
    assert sts[2]["sid"] in store.entries and new["sid"] in store.entries


def test_a_race_counts_among_the_sessions():
    """A Race's entry (SessionStore.open): counted in the stats with its two decoders, takes a place at the cap,
    is never evicted while it runs, and closing its tab stops it."""
    store = SessionStore(max_sessions=2, idle_timeout=1e9)
    (page,) = states(store, 1)
    sid, race = store.open("race", "tab-1")
    race.decoder = ["plain lane", "EAGLE lane"]
    assert store.stats() == {"sessions": 2, "decoders": 2, "running": 1, "races": 1}
    store.claim(store.entries[page["sid"]], "run")
    with pytest.raises(Busy):
        store.session({})                                         # full: the Race is not evicted
    with pytest.raises(Busy):
        store.open("race")
    assert store.sweep(time.time() + 1e10) == 0 and sid in store.entries
    assert store.drop_hash("tab-1") == 1 and race.stop.is_set()
    assert store.stats()["races"] == 0


class StubModel:
    def require(self):
        return None, {}


def test_stop_ends_a_generation_decoded_in_one_go(monkeypatch):
    """EAGLE_LENS_PRECOMPUTE=1: the Step or Run that starts a generation decodes it whole first; Stop ends that
    between cycles (Stopped, and no decoder is kept), not after the whole generation."""
    made = []

    def decoder(cfg, shift, prompt):
        made.append(FakeDecoder(60))
        return made[-1]
    monkeypatch.setattr(generation, "new_decoder", decoder)
    monkeypatch.setattr(generation, "MODEL", StubModel())
    monkeypatch.setattr(generation, "PRECOMPUTE", True)
    monkeypatch.setattr(generation, "ZERO_GPU", False)
    store = SessionStore(max_sessions=4, idle_timeout=1e9)
    (st,) = states(store, 1)
    ent = store.entries[st["sid"]]
    assert store.claim(ent, "run")
    threading.Timer(0.1, ent.stop.set).start()                    # Stop, a few cycles in
    t0 = time.perf_counter()
    with pytest.raises(UserError) as stopped:
        generation.ensure_decoder(st, ent, "hi", "shifted", DecodeConfig(), 60.0)
    assert type(stopped.value).__name__ == "Stopped"
    assert time.perf_counter() - t0 < 0.4 and len(made[0].cycles) < 30, "Stop waited for the whole generation"
    assert ent.decoder is None


def full_record(cycle, nodes=81, path=(1, 2)):
    tp = [{"token_id": 1, "text": "a", "prob": 0.5, "special": False}] * 5
    return {"cycle": cycle, "accepted_path": list(path), "new_tokens": [7] * (len(path) + 1), "accept_length": len(path),
            "nodes": [{"index": i, "text": "a", "token_id": 7, "parent": i - 1, "target_topk": tp, "draft_topk": tp}
                      for i in range(nodes)], "residual_topk": tp, "bonus_text": "b", "bonus_token": 8,
            "bonus_kind": "bonus"}


def test_a_session_keeps_the_whole_tree_of_its_last_cycles_only():
    """Older records keep the root and the accepted path (the text) and every counter (the statistics), marked
    slim; the last KEEP_DETAIL keep every node and distribution; nothing is changed in place."""
    recs = [full_record(c) for c in range(40)]
    out = generation.bounded(recs)
    k = generation.KEEP_DETAIL
    assert out[-k:] == recs[-k:] and not any(generation.is_slim(r) for r in out[-k:])
    old = out[0]
    assert generation.is_slim(old) and [n["index"] for n in old["nodes"]] == [0, 1, 2]
    assert old["residual_topk"] == [] and all(n["target_topk"] == n["draft_topk"] == [] for n in old["nodes"])
    assert {key: old[key] for key in recs[0] if key not in ("nodes", "residual_topk")} == \
        {key: recs[0][key] for key in recs[0] if key not in ("nodes", "residual_topk")}
    assert len(recs[0]["nodes"]) == 81 and not generation.is_slim(recs[0])      # the input is untouched
    assert generation.bounded(out) == out                                        # slimming twice changes nothing


def test_a_live_decoder_keeps_the_whole_tree_of_its_last_cycles_only():
    """`advance` slims the decoder's own CycleRecords as they fall out of the last KEEP_DETAIL (in place: the
    list keeps its length, each record its type); `bound_decoder` does it for a decoder stepped otherwise."""
    from eagle_core.decoding.records import CycleRecord, TokenProb, TreeNode

    class Dec(FakeDecoder):
        def step(self):
            tp = [TokenProb(1, "a", 0.5)] * 5
            nodes = [TreeNode(i, 7, "a", i - 1, i, 0.5, 0.5, 0.0, "accepted", target_topk=tp, draft_topk=tp)
                     for i in range(81)]
            self.cycles.append(CycleRecord(len(self.cycles), 10, nodes, [1], [7], 8, "b", "bonus", tp, [7, 8], 1,
                                           0.0, 0.0, 0.0, 2, 1, 2.0))
            return self.cycles[-1]
    dec = Dec(40)
    while not dec.done:
        generation.advance(dec, 1)
    k = getattr(generation, "KEEP_DETAIL", 16)
    assert len(dec.cycles) == 40 and all(isinstance(r, CycleRecord) for r in dec.cycles)
    assert all(len(r.nodes) == 81 for r in dec.cycles[-k:])
    assert all([n.index for n in r.nodes] == [0, 1] and not r.residual_topk and not r.nodes[1].target_topk
               for r in dec.cycles[:-k])
    more = Dec(60)                          # stepped some other way (a round of many sessions): bounded after
    for _ in range(60):
        more.step()
    generation.bound_decoder(more)
    assert [len(r.nodes) for r in more.cycles] == [2] * (60 - k) + [81] * k
