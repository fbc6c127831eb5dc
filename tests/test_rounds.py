"""The engine loop (serving/rounds.py): sessions asking for cycles from their own threads are stepped together, in
rounds, first come first served; each session's output is its output alone; Stop while waiting leaves the queue;
one broken generation does not take the others down."""
from __future__ import annotations

import threading

import pytest
import torch

from conftest import oracle_pair
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
from eagle_core.serving import rounds
from eagle_core.serving.turns import CANCELLED


@pytest.fixture(scope="module")
def pair(real_tokenizer):
    target, head = oracle_pair(real_tokenizer, kernels="exact")
    return target, head


def _cfgs():
    return [dict(draft="static", tree="cpu-12"), dict(draft="chain", depth=3, temperature=0.9, seed=2),
            dict(draft="vanilla"), dict(draft="dynamic", depth=3, top_k=3, total_tokens=8, temperature=0.5, seed=7)]


def _new(target, head, i, cfg, n=16):
    return EagleDecoder(target, None if cfg["draft"] == "vanilla" else head, DecodeConfig(max_new_tokens=n, **cfg),
                        [1, 100 + i, 7, 300 + i])


def _drive(gen):
    """Run a cycle_turn generator to its return value."""
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


def test_sessions_in_threads_share_rounds_and_keep_their_own_output(pair):
    target, head = pair
    loop = rounds.RoundLoop(round_max=8)
    alone = []
    for i, cfg in enumerate(_cfgs() * 2):
        d = _new(target, head, i, cfg)
        while not d.done:
            d.step()
        alone.append(d.new_ids)
    decs = [_new(target, head, i, cfg) for i, cfg in enumerate(_cfgs() * 2)]
    start = threading.Barrier(len(decs))

    def student(d):
        start.wait()
        while not d.done:
            got = _drive(cycle_turn(loop, d))
            assert got and got[0]["new_tokens"]
    threads = [threading.Thread(target=student, args=(d,)) for d in decs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [d.new_ids for d in decs] == alone
    shared = [r for d in decs for r in d.cycles if r.pass_sessions > 1]
    assert shared and max(r.pass_sessions for r in shared) >= 4 and loop.rounds < sum(len(d.cycles) for d in decs)


def cycle_turn(loop, dec, cancel=None):
    """rounds.cycle_turn on this test's own loop."""
    saved = rounds.LOOP
    rounds.LOOP = loop
    try:
        return (yield from rounds.cycle_turn(dec, cancel=cancel))
    finally:
        rounds.LOOP = saved


def test_a_full_round_serves_first_come_first(pair):
    target, head = pair
    loop = rounds.RoundLoop(round_max=2)
    decs = [_new(target, head, i, dict(draft="chain", depth=2)) for i in range(5)]
    gate = threading.Event()
    real = loop._round

    def held(batch):
        gate.wait(10)
        real(batch)
    loop._round = held
    with loop.cv:                     # all five queued before the loop takes its first round
        reqs = [loop.submit(d) for d in decs]
    while not reqs[0].started:
        pass
    assert [loop.ahead(r) for r in reqs[2:]] == [0, 0, 1]   # round 1 holds 0-1; 2-3 next; 4 the one after
    gate.set()
    for r in reqs:
        assert r.done.wait(30) and r.error is None
    assert all(len(d.cycles) == 1 for d in decs) and loop.rounds == 3     # 2 + 2 + 1, in order


def test_stop_while_waiting_leaves_the_queue(pair):
    target, head = pair
    loop = rounds.RoundLoop(round_max=1)
    gate = threading.Event()
    real = loop._round
    loop._round = lambda batch: (gate.wait(10), real(batch))
    first, second = _new(target, head, 0, dict(draft="vanilla")), _new(target, head, 1, dict(draft="vanilla"))
    r1 = loop.submit(first)
    stop = threading.Event()
    stop.set()
    assert _drive(cycle_turn(loop, second, cancel=stop)) is CANCELLED
    gate.set()
    assert r1.done.wait(30) and not second.cycles and loop.waiting() == 0


def test_a_broken_generation_does_not_take_the_round_down(pair):
    target, head = pair
    loop = rounds.RoundLoop()
    good, bad = _new(target, head, 0, dict(draft="chain", depth=2)), _new(target, head, 1, dict(draft="chain", depth=2))
    for d in (good, bad):
        d.step()

    def broken(*a, **k):
        raise RuntimeError("a broken head")
    bad.draft_steps = broken     # its drafting fails, in a round and alone
    r_good, r_bad = loop.submit(good), loop.submit(bad)
    assert r_good.done.wait(30) and r_bad.done.wait(30)
    assert r_good.error is None and r_good.record["cycle"] == 1
    assert isinstance(r_bad.error, RuntimeError) and len(bad.cycles) == 1


def test_a_class_that_comes_back_a_little_late_stays_in_one_round(pair):
    """The generations of the last round ask again a few milliseconds apart (each thread records its cycle
    first): the loop waits for them (GATHER_S) instead of splitting the class into half-rounds; one that never
    comes back delays the next round by GATHER_S at most."""
    target, head = pair
    loop = rounds.RoundLoop()
    decs = [_new(target, head, i, dict(draft="chain", depth=2)) for i in range(3)]
    for r in [loop.submit(d) for d in decs]:          # prefills
        assert r.done.wait(30)
    first = [loop.submit(d) for d in decs]
    assert all(r.done.wait(30) for r in first) and {r.record["pass_sessions"] for r in first} == {3}
    late = [loop.submit(decs[0])]
    threading.Event().wait(rounds.GATHER_S / 3)       # the others come back late, but within the wait
    late += [loop.submit(d) for d in decs[1:]]
    assert all(r.done.wait(30) for r in late)
    assert [r.record["pass_sessions"] for r in late] == [3, 3, 3]
    import time
    t0 = time.perf_counter()                          # now only one comes back: one short wait, then alone
    alone = loop.submit(decs[0])
    assert alone.done.wait(30) and alone.record["pass_sessions"] == 1
    assert time.perf_counter() - t0 < rounds.GATHER_S + 2.0


def test_jobs_run_in_the_loop_a_few_a_round_first_come_first(pair):
    """"How can I" is a job of the loop: run in the next round with room for it, its value (or its error) handed
    back; at most JOBS_PER_ROUND a round, in the order asked, so a burst of them never holds the class's cycles
    back by more than a couple of jobs a round."""
    target, head = pair
    loop = rounds.RoundLoop()
    dec = _new(target, head, 0, dict(draft="chain", depth=2), n=40)
    gate = threading.Event()
    real = loop._round
    ran = []                                   # (job, rounds completed when it ran)

    def held(batch):
        gate.wait(10)
        real(batch)
    loop._round = held
    with loop.cv:                               # five jobs and one cycle, queued before the first round
        jobs = [loop.submit(None, job=lambda k=k: ran.append((k, loop.rounds)) or k * k) for k in range(5)]
        cycles = [loop.submit(dec)]
    gate.set()
    assert all(r.done.wait(30) for r in jobs + cycles)
    assert [r.result for r in jobs] == [0, 1, 4, 9, 16] and [k for k, _ in ran] == [0, 1, 2, 3, 4]
    per_round = [sum(1 for _, n in ran if n == i) for i in sorted({n for _, n in ran})]
    assert max(per_round) == rounds.JOBS_PER_ROUND and len(per_round) == 3
    assert ran[2][1] >= 1, "the cycle went in the first round, beside the first two jobs, not after all five"
    assert cycles[0].record["cycle"] == 0


def test_a_failing_job_raises_in_its_caller_and_the_loop_goes_on(pair, monkeypatch):
    target, head = pair
    loop = rounds.RoundLoop()
    monkeypatch.setattr(rounds, "LOOP", loop)

    def broken():
        raise ValueError("bad prefix")
    with pytest.raises(ValueError, match="bad prefix"):
        _drive(rounds.job_turn(broken))
    assert rounds.run_job(lambda: 42) == 42
    dec = _new(target, head, 1, dict(draft="vanilla"))
    assert _drive(rounds.cycle_turn(dec))[0]["cycle"] == 0


def test_a_class_arriving_at_once_reads_its_prompts_a_few_a_round(pair):
    """New generations' prompts go in a round up to PREFILL_ROWS tokens (a prompt over the budget in chunks), first
    come first served, so the generations already decoding are not held behind thirty prompts in one pass; and the
    queue note says which wait."""
    target, head = pair
    loop = rounds.RoundLoop(round_max=8, prefill_rows=9)          # these prompts are 4 tokens: 2 and 1/4 a round
    going = _new(target, head, 9, dict(draft="chain", depth=2))
    going.step()                                                   # already decoding: never held back
    decs = [_new(target, head, i, dict(draft="chain", depth=2)) for i in range(5)]
    gate = threading.Event()
    real, sizes = loop._round, []

    def held(batch):
        gate.wait(10)
        sizes.append(sorted(len(r.decoder.cycles) for r in batch))
        real(batch)
    loop._round = held
    with loop.cv:
        first = loop.submit(decs[0])
    while not first.started:
        pass
    with loop.cv:                     # queued while round 1 (decs[0] alone) is held
        reqs = [loop.submit(d) for d in decs[1:]] + [loop.submit(going)]
    assert [loop.ahead(r) for r in reqs] == [0, 0, 0, 1, 0]       # 1-2 and a chunk of 3 next, with `going`; then 4
    gate.set()
    for r in [first] + reqs:
        assert r.done.wait(30) and r.error is None
    assert sizes == [[0], [0, 0, 0, 1], [0, 0]]     # prompts read: 1, then 2 and a row of 3 (+ going), then 3's rest + 4
    assert all(len(d.cycles) == 1 for d in decs) and len(going.cycles) == 2


def test_short_prompts_are_read_before_a_long_one_queued_first(pair):
    """The prompt budget goes to the prompts with the fewest tokens left to read: a long prompt queued first does not
    hold the class's short ones for its chunks (its own chunks follow), and a generation already decoding is never
    held for either."""
    target, head = pair
    loop = rounds.RoundLoop(round_max=8, prefill_rows=10)
    going = _new(target, head, 9, dict(draft="chain", depth=2))
    going.step()
    long = EagleDecoder(target, head, DecodeConfig(max_new_tokens=4, draft="chain", depth=2),
                        [1] + list(range(400, 424)))                       # 25 tokens: three chunks of 10
    short = [_new(target, head, i, dict(draft="chain", depth=2)) for i in range(2)]   # 4 tokens each
    with loop.cv:
        reqs = [loop.submit(long)] + [loop.submit(d) for d in short] + [loop.submit(going)]
        batch = loop._select(loop.queue)
    assert [r.decoder for r in batch] == [going, short[0], short[1], long]
    assert [r.prompt_rows for r in batch] == [None, 4, 4, 2]          # the long prompt takes what is left
    with loop.cv:
        loop.queue.clear()
    del reqs


def _solo(target, head, cfgs, n=16):
    out = []
    for i, cfg in enumerate(cfgs):
        d = _new(target, head, i, cfg, n)
        while not d.done:
            d.step()
        out.append(d.new_ids)
    return out


def _finish_in_rounds(loop, decs):
    """Every decoder to its end, all in the loop's rounds (one request each per round)."""
    while not all(d.done for d in decs):
        reqs = [loop.submit(d) for d in decs if not d.done]
        for r in reqs:
            assert r.done.wait(60) and r.error is None, r.error


ROUND_CFGS = [dict(draft="chain", depth=3), dict(draft="static", tree="cpu-12"),
              dict(draft="chain", depth=3, temperature=0.9, seed=2), dict(draft="vanilla")]


def _fail_once(obj, name, after=0):
    """obj.name raises on its call number after + 1, then works again; returns the calls seen."""
    real, calls = getattr(obj, name), []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == after + 1:
            raise RuntimeError(f"injected: {name} failed")
        return real(*a, **k)
    setattr(obj, name, flaky)
    return calls


def test_a_round_that_fails_mid_pass_is_undone_for_everyone(pair):
    """The shared pass fails in the last layer's MLP, after every layer appended every generation's KV entries:
    the round is undone (no stale entries), each generation then steps alone, and every text is its solo text."""
    target, head = pair
    want = _solo(target, head, ROUND_CFGS)
    loop = rounds.RoundLoop()
    decs = [_new(target, head, i, cfg) for i, cfg in enumerate(ROUND_CFGS)]
    for d in decs:
        d.step()
        d.step()
    down = target.model.model.layers[-1].mlp.down_proj
    real, failed = down.forward, []
    kv0 = [d.cache.layers[0].keys.shape[-2] for d in decs]

    def flaky(x):        # fails once, inside the round's pass: once every generation's layer 0 holds its tree
        if not failed and all(d.cache.layers[0].keys.shape[-2] > n for d, n in zip(decs, kv0)):
            failed.append(x.shape)
            raise RuntimeError("injected: the pass failed in the last layer")
        return real(x)
    down.forward = flaky
    try:
        kv_before = [len(d.tokens) for d in decs]
        reqs = [loop.submit(d) for d in decs]
        for r in reqs:
            assert r.done.wait(60) and r.error is None, r.error
        assert failed, "the injected failure did not run (the pass took another road)"
    finally:
        del down.forward
    for d, before in zip(decs, kv_before):
        assert len(d.cycles) == 3 and len(d.tokens) > before
        assert d.cache.layers[0].keys.shape[-2] == len(d.tokens) - 1, "stale KV entries kept"
    _finish_in_rounds(loop, decs)
    assert [d.new_ids for d in decs] == want


def test_a_round_that_fails_after_some_committed_commits_each_once(pair):
    """Generation 3's acceptance fails after generations 1-2 committed their cycle: all are put back, 1, 2 and 4
    get exactly one cycle (and one record), 3 its error with nothing changed; then every text is its solo text."""
    target, head = pair
    want = _solo(target, head, ROUND_CFGS)
    loop = rounds.RoundLoop()
    decs = [_new(target, head, i, cfg) for i, cfg in enumerate(ROUND_CFGS)]
    for d in decs:
        d.step()
    bad = decs[2]

    def broken(*a, **k):
        raise RuntimeError("injected: acceptance failed")
    bad.finish_cycle = broken                     # in the round and alone
    tokens = [list(d.tokens) for d in decs]
    reqs = [loop.submit(d) for d in decs]
    for r in reqs:
        assert r.done.wait(60)
    assert isinstance(reqs[2].error, RuntimeError) and reqs[2].record is None
    assert bad.tokens == tokens[2] and len(bad.cycles) == 1
    for i in (0, 1, 3):
        d = decs[i]
        assert reqs[i].error is None and reqs[i].record["cycle"] == 1 and len(d.cycles) == 2
        assert d.tokens[:len(tokens[i])] == tokens[i] and len(d.new_ids) == len(d.tokens) - 4
    del bad.finish_cycle
    _finish_in_rounds(loop, decs)
    assert [d.new_ids for d in decs] == want


def test_the_loop_survives_failures_in_shaping_and_logging(pair, caplog):
    """An error in the round's shapes is undone like any other (each then steps alone); one in the round's log
    line after the cycles were answered keeps the answers; the loop thread lives on and says it in the log."""
    target, head = pair
    loop = rounds.RoundLoop()
    decs = [_new(target, head, i, cfg) for i, cfg in enumerate(ROUND_CFGS)]
    for d in decs:
        d.step()
    _fail_once(loop, "_shapes")
    reqs = [loop.submit(d) for d in decs]
    for r in reqs:
        assert r.done.wait(60) and r.error is None and r.record["cycle"] == 1
    assert all(len(d.cycles) == 2 for d in decs)
    _fail_once(loop, "_log")
    with caplog.at_level("ERROR", logger="eagle_lens.rounds"):
        reqs = [loop.submit(d) for d in decs]
        for r in reqs:
            assert r.done.wait(60) and r.error is None and r.record["cycle"] == 2
    assert "round" in caplog.text and "injected: _log failed" in caplog.text
    assert loop.thread.is_alive()
    r = loop.submit(decs[0])
    assert r.done.wait(60) and r.error is None and r.record["cycle"] == 3


def test_every_student_drafts_the_tree_they_set_unless_the_teacher_sizes_them(pair, monkeypatch):
    """Off (the default): a round of four drafts each one's own tree, and no record says otherwise. On (the
    teacher's switch): the round's shapes come from the load budget, and each record says what it was given
    beside what was set."""
    from eagle_core.decoding import load_budget
    from eagle_core.decoding.draft import DraftSpec
    target, head = pair
    cfgs = [dict(draft="chain", depth=3), dict(draft="static", tree="cpu-12"), dict(draft="chain", depth=2),
            dict(draft="dynamic", depth=3, top_k=3, total_tokens=8)]
    asked = []
    monkeypatch.setattr(load_budget, "round_shapes",
                        lambda budget, decs: asked.append(len(decs)) or [DraftSpec("chain", depth=1)] * len(decs))
    loop = rounds.RoundLoop()
    assert loop.load_sized is False
    monkeypatch.setattr(loop, "budget", lambda target: None)
    decs = [_new(target, head, i, cfg) for i, cfg in enumerate(cfgs)]
    for d in decs:
        d.step()
    with loop.cv:                     # all four queued before the loop takes a round
        reqs = [loop.submit(d) for d in decs]
    for r, d in zip(reqs, decs):
        assert r.done.wait(60) and r.error is None
        assert r.record["tree_given"] == "" and r.record["pass_sessions"] == 4
        assert len(r.record["nodes"]) - 1 == len(d.spec.static_choices()) or d.spec.kind == "dynamic"
    assert not asked, "the load budget was asked while the teacher's switch was off"
    loop.load_sized = True
    with loop.cv:
        reqs = [loop.submit(d) for d in decs]
    for r, d in zip(reqs, decs):
        assert r.done.wait(60) and r.error is None
        assert len(r.record["nodes"]) <= 2
        assert r.record["tree_given"] == f"a chain of 1 (you set {d.spec.describe()})", r.record["tree_given"]
    assert asked == [4]


def test_only_the_teachers_link_changes_the_class_setting(monkeypatch):
    from types import SimpleNamespace
    teacher = pytest.importorskip("tabs.teacher")
    loop = rounds.RoundLoop()
    monkeypatch.setattr(teacher, "LOOP", loop)
    student = SimpleNamespace(query_params={})
    guess = SimpleNamespace(query_params={"teacher": "guess"})
    mine = SimpleNamespace(query_params={"teacher": teacher.TOKEN})
    assert not teacher.is_teacher(student) and not teacher.is_teacher(guess) and teacher.is_teacher(mine)
    box, _, _ = teacher.on_teacher_open(student)
    assert box.visible is False
    box, _, _ = teacher.on_teacher_open(mine)
    assert box.visible is True
    for req in (student, guess):
        box, note = teacher.on_load_sized(True, req)
        assert loop.load_sized is False and box.value is False and "Only the teacher" in note
    box, note = teacher.on_load_sized(True, mine)
    assert loop.load_sized is True and box.value is True and "On" in note
    assert teacher.teacher_link("http://127.0.0.1:7860/").endswith(f"/?teacher={teacher.TOKEN}")


def test_a_long_prompt_is_read_in_chunks_while_the_class_steps_on(pair):
    """A 41-token prompt with a 12-row prompt budget per round: it is read over 4 rounds (12 + 12 + 12 + 5), its
    student's Step answered once, with the prefill record, after the last; the two students already decoding get a
    cycle in every one of those rounds; every text is its solo text and the chunked KV cache is the one-pass one."""
    target, head = pair
    long_ids = [1] + [100 + (7 * i) % 500 for i in range(40)]
    loop = rounds.RoundLoop(prefill_rows=12)
    mk = lambda i, cfg, ids: EagleDecoder(target, head, DecodeConfig(max_new_tokens=12, **cfg), ids)  # noqa: E731
    cfgs = [dict(draft="chain", depth=3), dict(draft="static", tree="cpu-12"), dict(draft="chain", depth=2)]
    prompts = [[1, 100, 7, 300], [1, 101, 7, 301], long_ids]
    solo = []
    for i, (cfg, ids) in enumerate(zip(cfgs, prompts)):
        d = mk(i, cfg, ids)
        while not d.done:
            d.step()
        solo.append(d.new_ids)
    fresh = mk(2, cfgs[2], long_ids)
    fresh.step()
    decs = [mk(i, cfg, ids) for i, (cfg, ids) in enumerate(zip(cfgs, prompts))]
    for d in decs[:2]:
        d.step()
    sizes, real = [], loop._round

    def seen(batch):
        sizes.append([r.prompt_rows or 0 for r in batch])
        real(batch)
    loop._round = seen
    with loop.cv:
        long_req = loop.submit(decs[2])
    others_cycles = 0
    while not long_req.done.is_set():
        with loop.cv:
            reqs = [loop.submit(d) for d in decs[:2] if not d.done]
        for r in reqs:
            assert r.done.wait(60) and r.error is None
        others_cycles += 1
    assert long_req.error is None and long_req.record["cycle"] == 0 and len(decs[2].cycles) == 1
    assert [max(s) for s in sizes[:4]] == [12, 12, 12, 5], sizes
    assert others_cycles >= 3, "the others waited behind the long prompt"
    assert decs[2].target_forwards == 4
    for a, b in zip(decs[2].cache.layers, fresh.cache.layers):
        n = len(long_ids)
        assert torch.equal(a.keys[:, :, :n], b.keys[:, :, :n]) and torch.equal(a.values[:, :, :n], b.values[:, :, :n])
    _finish_in_rounds(loop, decs)
    assert [d.new_ids for d in decs] == solo
