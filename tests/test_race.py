"""The Race: its verdict on two generations (where they part, the target's logit margin there, the sentence), and
the watched Race: the fair schedule of plain decoding and EAGLE on one model (eagle_core/serving/race.py), the
board's counters and ratio (views/race.py), Stop, and the Race through the app's API."""
from __future__ import annotations

import html
import json
import re
import threading
import time

import pytest
import torch

from eagle_core.bench.metrics import cycle_seconds
from eagle_core.decoding import divergence
from eagle_core.serving import race as srace
from eagle_core.serving.turns import MODEL_LOCK, one_turn
from views import race as vrace


def test_divergence_index_tokens_and_margin(tiny_target):
    ids = tiny_target.render_prompt("How can I")
    assert divergence.divergence(tiny_target, ids, [10, 20, 30], [10, 20, 30]) is None
    assert divergence.divergence(tiny_target, ids, [10, 20], [10, 20, 30]) is None   # a prefix: no token to compare
    assert divergence.divergence(tiny_target, ids, [], []) is None

    div = divergence.divergence(tiny_target, ids, [10, 20, 30, 40], [10, 20, 31, 7])
    assert (div["index"], div["plain_token"], div["eagle_token"]) == (2, 30, 31)
    assert div["plain_text"] == tiny_target.token_text(30) and div["eagle_text"] == tiny_target.token_text(31)
    with torch.no_grad():   # the logits after prompt + common prefix, computed directly
        logits = tiny_target.model(torch.tensor([ids + [10, 20]])).logits[0, -1].float()
    assert div["margin"] == pytest.approx(abs(float(logits[30] - logits[31])), abs=1e-5)
    top = torch.topk(logits, 2).values
    assert div["top2_margin"] == pytest.approx(float(top[0] - top[1]), abs=1e-5)
    assert div["top_token"] == int(logits.argmax())
    # near_tie reads the same top-2 margin
    assert divergence.near_tie(tiny_target, ids, [10, 20], eps=div["top2_margin"] + 1e-6)
    assert not divergence.near_tie(tiny_target, ids, [10, 20], eps=div["top2_margin"] / 2)

    # the greedy case: plain took the argmax, EAGLE the runner-up -> margin == top-2 margin
    first, second = torch.topk(logits, 2).indices.tolist()
    div = divergence.divergence(tiny_target, ids, [10, 20, first], [10, 20, second])
    assert div["margin"] == pytest.approx(div["top2_margin"], abs=1e-6)
    # a divergence at the very first token uses the prompt alone
    div = divergence.divergence(tiny_target, ids, [5], [6])
    assert div["index"] == 0


def test_tie_eps_for_dtype():
    assert divergence.tie_eps_for(torch.float32) == divergence.TIE_EPS
    assert divergence.tie_eps_for(torch.bfloat16) > divergence.tie_eps_for(torch.float16) > divergence.TIE_EPS


def test_race_sentence():
    app = pytest.importorskip("app")
    div = {"index": 3, "plain_token": 1, "eagle_token": 2, "plain_text": " the", "eagle_text": "\n",
           "margin": 3e-5, "top_token": 1, "top2_margin": 3e-5}
    assert app.race_sameness(True, [1, 2], [1, 2], None, 1e-4) == "identical text (greedy: token for token)"
    tie = app.race_sameness(True, [0, 0, 0, 1], [0, 0, 0, 2], div, 1e-4)
    assert tie.startswith("texts part at token 3: plain “ the” vs EAGLE “\\n”")
    assert "near-tie (logit margin 3e-05" in tie and "not a sampling difference" in tie
    assert "different samples" not in tie and "bug" not in tie
    bug = app.race_sameness(True, [0, 0, 0, 1], [0, 0, 0, 2], dict(div, margin=2.5), 1e-4)
    assert "not a near-tie (logit margin 2.5 > 0.0001)" in bug and "real mismatch" in bug and "bug" in bug
    assert "different samples" not in bug
    sampled = app.race_sameness(False, [1, 2], [1, 3], None, 0.0)
    assert sampled.startswith("different samples (T > 0") and "exact samples of the target" in sampled
    assert app.race_sameness(False, [1, 2], [1, 2], None, 0.0) == "identical text"
    assert "one stopped earlier" in app.race_sameness(True, [1, 2], [1, 2, 3], None, 1e-4)


# ----------------------------------------------------------------------------- the watched Race: the schedule
# eagle_core/serving/race.py interleaves plain decoding and EAGLE on the one model by model time; views/race.py
# draws the board. Fake decoders (fixed engine seconds per cycle) make the schedule exact; the oracle pair runs it
# on real decoders.


class FakeDecoder:
    """`per_cycle` tokens per cycle, `dt` engine seconds per cycle (recorded, not slept), up to `n` tokens."""

    def __init__(self, dt, per_cycle, n):
        self.dt, self.k, self.n, self.made, self.cycles = dt, per_cycle, n, 0, []

    @property
    def done(self):
        return self.made >= self.n

    def step(self):
        k = min(self.k, self.n - self.made)
        self.made += k
        rec = dict(cycle=len(self.cycles), new_tokens=[100 + self.made - k + i for i in range(k)],
                   new_token_bytes=[b"a".hex()] * k, nodes=[{"index": 1 + i, "text": "a", "token_id": 7}
                                                            for i in range(k - 1)],
                   accepted_path=list(range(1, k)), bonus_text="a", bonus_kind="bonus", bonus_token=7,
                   total_new_tokens=self.made, target_forwards=len(self.cycles) + 1, draft_seconds=0.0,
                   verify_seconds=self.dt, other_seconds=0.0, tau=self.made / (len(self.cycles) + 1),
                   accept_length=k - 1, finished="max_new_tokens" if self.made >= self.n else None)
        self.cycles.append(rec)
        return rec


def fake_lanes(n=12):
    # plain: 1 token per 1/64 s cycle; EAGLE: 3 tokens per 3/64 s cycle (the same tokens/s: a fair share is
    # even); binary fractions, so equal model times are exact ties
    return [srace.Lane(srace.PLAIN, decoder=FakeDecoder(1 / 64, 1, n)),
            srace.Lane(srace.EAGLE, decoder=FakeDecoder(3 / 64, 3, n))]


def moves(gen):
    return [ev for ev in gen if isinstance(ev, srace.Lane)]


def test_race_shares_the_model_by_model_time():
    lanes = fake_lanes()
    order = [ln.name for ln in moves(srace.race_in_turns(lanes))]
    # the one with less engine time goes next (a tie: plain): 3 plain cycles per EAGLE cycle, from the start
    assert order[:9] == ["plain", "EAGLE", "plain", "plain", "plain", "EAGLE", "plain", "plain", "plain"]
    first_done = min(order.index("EAGLE"), order.index("plain"))
    assert first_done == 0 and order.index("EAGLE") < order.count("plain")   # EAGLE starts before plain ends
    last_plain = len(order) - 1 - order[::-1].index("plain")
    assert order.index("EAGLE") < last_plain and order.index("plain") < len(order) - 1 - order[::-1].index("EAGLE")
    assert [ln.tokens() for ln in lanes] == [list(range(100, 112))] * 2
    assert all(ln.done and not ln.stopped and ln.finished == "max_new_tokens" for ln in lanes)


def test_race_turn_order_on_real_decoders_is_fair_and_lossless(oracle):
    """Live decoders (oracle pair: EAGLE accepts long paths): before every cycle the lane that moves had no more
    engine time than the other (while both run); the two texts are identical at T = 0; other sessions get the
    model between the Race's cycles (one cycle per model turn)."""
    from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
    target, head = oracle
    ids = target.render_prompt("How can I learn Python?")
    cfg = DecodeConfig(draft="static", tree="cpu-12", max_new_tokens=40, record_topk=0)
    lanes = [srace.Lane(srace.PLAIN, decoder=EagleDecoder(target, None, DecodeConfig(draft="vanilla",
                                                                                  max_new_tokens=40), ids)),
             srace.Lane(srace.EAGLE, decoder=EagleDecoder(target, head, cfg, ids))]
    other, racing, ended = [], threading.Event(), threading.Event()

    def another_session():          # a classmate's Steps: one model turn at a time, while the Race runs
        racing.wait(10)
        while not ended.is_set():
            with one_turn():
                other.append(sum(len(ln.records) for ln in lanes))
            time.sleep(0.002)
    th = threading.Thread(target=another_session)
    th.start()
    order = []
    try:
        for ev in srace.race_in_turns(lanes):
            if not isinstance(ev, srace.Lane):
                continue
            racing.set()
            before = ev.seconds - cycle_seconds(ev.records[-1])
            rival = lanes[1] if ev is lanes[0] else lanes[0]
            if not rival.done:
                assert before <= rival.seconds + 1e-12, (ev.name, before, rival.seconds)
            order.append(ev.name)
    finally:
        ended.set()
        th.join()
    plain, eagle = lanes
    assert plain.tokens() == eagle.tokens() and len(plain.tokens()) == 40    # lossless at T = 0
    # each panel shows its lane's text (lean records name no tokens: the lanes name them, after the turn)
    assert not any(r.new_token_bytes for r in eagle.decoder.cycles[1:])
    for ln in lanes:
        shown = html.unescape(re.sub(r"<[^>]+>", "", vrace.lane_text_html(ln.records))).replace("↵\n", "\n")
        assert shown == target.decode(ln.tokens()), ln.name
    assert eagle.records[-1]["target_forwards"] < plain.records[-1]["target_forwards"]
    # neither finished its whole generation before the other started, and they alternate more than once
    assert order.index("EAGLE") < len(order) - 1 - order[::-1].index("plain")
    assert order.index("plain") < len(order) - 1 - order[::-1].index("EAGLE")
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert switches >= 3, order
    # the classmate got turns in the middle of the Race, not only after it
    total = len(order)
    assert any(0 < k < total for k in other), (other[:5], total)


def test_race_counters_and_ratio_come_from_the_records():
    lanes = fake_lanes(n=9)
    gen = srace.race_in_turns(lanes)
    for _ in range(5):                                   # mid-race: plain 4 cycles, EAGLE 1
        next(gen)
    lanes[0].elapsed, lanes[1].elapsed = 123.0, 456.0    # wall clock (waits): never in the speeds
    html = vrace.race_board_html([dict(name=ln.name, records=ln.records, elapsed=ln.elapsed, state="running")
                                  for ln in lanes], 9, "How can I?")
    for ln in lanes:
        recs = ln.records
        c = vrace.lane_counts(recs, ln.elapsed)
        assert c["tokens"] == sum(len(r["new_tokens"]) for r in recs) == recs[-1]["total_new_tokens"]
        assert c["forwards"] == recs[-1]["target_forwards"] == len(recs)
        assert c["seconds"] == pytest.approx(sum(cycle_seconds(r) for r in recs)) == pytest.approx(ln.seconds)
        assert c["tokens_per_s"] == pytest.approx(c["tokens"] / c["seconds"])
        assert f"data-lane='{ln.name}' data-state='running' data-tokens='{c['tokens']}'" in html
        assert f"<b>{c['tokens_per_s']:.1f}</b><span class='el-race-long'>tokens/s (engine)</span>" in html
        assert f"<b>{ln.elapsed:.1f} s</b><span class='el-race-long'>elapsed (wall clock)</span>" in html
    rules = vrace.rules_html()
    assert "Fair share of one model" in rules and "less model time" in rules and "waiting for a turn" in rules
    assert html.count("class='el-race-new'") == 2        # each lane's newest cycle is marked (underlined)
    list(gen)
    p, e = lanes[0].records, lanes[1].records
    ratio = (sum(len(r["new_tokens"]) for r in e) / sum(cycle_seconds(r) for r in e)) / \
        (sum(len(r["new_tokens"]) for r in p) / sum(cycle_seconds(r) for r in p))
    assert vrace.speed_ratio(p, e) == pytest.approx(ratio) == pytest.approx(1.0)
    done = vrace.ratio_html(p, e)
    assert f"data-ratio='{ratio:.4f}'" in done and "Measured: <b>1.00×</b>" in done and "so far" not in done
    fast = [dict(r, verify_seconds=r["verify_seconds"] / 2) for r in e]   # EAGLE at half the engine time
    assert vrace.speed_ratio(p, fast) == pytest.approx(2.0) and "(EAGLE faster: EAGLE" in vrace.ratio_html(p, fast)
    # the ratio taken apart, exactly: tau (3 tokens per pass vs 1) / model time per pass (1.5/64 s vs 1/64 s)
    assert "2.00× = 3.00 (tokens per target pass, EAGLE over plain: τ) ÷ 1.50 (model time per" in \
        vrace.ratio_html(p, fast)
    slow = [dict(r, verify_seconds=r["verify_seconds"] * 4) for r in e]
    assert "0.25× = 3.00" in vrace.ratio_html(p, slow) and "not enough to pay for the costlier pass" in \
        vrace.ratio_html(p, slow)
    assert vrace.speed_ratio(p, []) is None and "No ratio" in vrace.ratio_html(p, [])


def test_race_stop_ends_it_within_one_cycle_and_leaves_the_queue():
    lanes, stop = fake_lanes(n=30), threading.Event()
    gen = srace.race_in_turns(lanes, cancel=stop)
    for _ in range(3):
        next(gen)
    stop.set()
    with pytest.raises(StopIteration) as fin:
        next(gen)
    assert fin.value.value == "stopped"
    assert sum(len(ln.records) for ln in lanes) == 3 and all(ln.stopped for ln in lanes)
    # Stop while waiting for the model's turn (another session holds it): at once, and the queue place is freed
    lanes, stop, out = fake_lanes(n=30), threading.Event(), {}
    with MODEL_LOCK.hold():
        th = threading.Thread(target=lambda: out.update(r=list(srace.race_in_turns(lanes, cancel=stop))))
        th.start()
        time.sleep(0.3)
        assert MODEL_LOCK.waiting() == 1 and not any(ln.records for ln in lanes)
        t0 = time.perf_counter()
        stop.set()
        th.join(5)
        assert not th.is_alive() and time.perf_counter() - t0 < 1.0
        assert MODEL_LOCK.waiting() == 0 and all(ln.stopped for ln in lanes)


def test_recorded_race_reveals_at_the_engine_pace():
    """ZeroGPU / PRECOMPUTE: both generations decoded first, then revealed with the same schedule, each cycle
    after its own engine time (no model lock: nothing runs on the model)."""
    recs = [moves(srace.race_in_turns([ln]))[-1].records for ln in fake_lanes(n=6)]
    lanes = [srace.Lane(srace.PLAIN, pending=list(recs[0])), srace.Lane(srace.EAGLE, pending=list(recs[1]))]
    t0 = time.perf_counter()
    order = [ln.name for ln in moves(srace.race_in_turns(lanes))]
    assert order == ["plain", "EAGLE", "plain", "plain", "plain", "EAGLE", "plain", "plain"]
    assert time.perf_counter() - t0 >= 12 / 64 - 1e-3         # 6 x 1/64 s + 2 x 3/64 s, slept in turn
    assert [ln.records for ln in lanes] == recs and all(ln.finished for ln in lanes)


# ----------------------------------------------------------------------------- the Race through the app's API
LANES_RE = re.compile(r"data-lane='(\w+)' data-state='(\w+)' data-tokens='(\d+)' data-forwards='(\d+)'")


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("gradio_client")
    from gradio_client import Client
    from servers import app_in_process
    with app_in_process("tiny") as url:
        yield Client(url, verbose=False)


def finish(job, limit=120):
    t0 = time.time()
    while not job.done() and time.time() - t0 < limit:
        time.sleep(0.05)
    assert job.done(), "the Race did not end"
    return job.outputs()


@pytest.mark.slow
def test_race_streams_both_lanes_then_the_ratio(client, monkeypatch):
    import tabs.race
    from servers import cfg
    # every cycle pushed: the tiny target decodes 40 tokens in well under a second, so at the page's pace
    # (one push per 0.35 s) how many updates show both lanes running depends on the machine's speed
    monkeypatch.setattr(tabs.race, "RACE_STREAM_S", 0.0)
    outs = finish(client.submit("How can I learn Python?", True, *cfg(max_new=40), api_name="/race"))
    boards = [o[1] for o in outs]
    lanes = [{m[0]: (m[1], int(m[2]), int(m[3])) for m in LANES_RE.findall(b)} for b in boards]
    assert all(set(ln) == {"plain", "EAGLE"} for ln in lanes), boards[0][:300]
    # watched: updates while both are running with text, and each lane's count grows over several updates
    both = [ln for ln in lanes if ln["plain"][0] == ln["EAGLE"][0] == "running"]
    assert both and all(ln["plain"][1] > 0 and ln["EAGLE"][1] > 0 for ln in both), lanes
    for name in ("plain", "EAGLE"):
        counts = [ln[name][1] for ln in lanes]
        assert counts == sorted(counts) and len(set(counts)) >= 3, (name, counts)
    assert "Measured" not in "".join(boards[:-1])             # the ratio comes at the end, once both finished
    final = boards[-1]
    assert lanes[-1]["plain"] == ("finished", 40, 40) and lanes[-1]["EAGLE"][:2] == ("finished", 40)
    assert "Race" in final and "identical text" in final      # the sameness sentence stays
    # the ratio shown is the counters' engine tokens/s, EAGLE over plain
    tps = [float(x) for x in re.findall(r"<b>([\d.]+)</b><span class='el-race-long'>tokens/s \(engine\)</span>",
                                         final)]
    ratio = float(re.search(r"data-ratio='([\d.]+)'", final).group(1))
    assert len(tps) == 2 and ratio == pytest.approx(tps[1] / tps[0], rel=0.02)
    assert f"<b>{ratio:.2f}×</b>" in final
    assert "speedup" in json.loads(outs[-1][0]["plot"])["layout"]["title"]["text"]   # the summary figure


@pytest.mark.slow
def test_race_stop_and_a_second_race(client):
    from servers import cfg
    job = client.submit("How can I learn Python?", True, *cfg(max_new=400), api_name="/race")
    t0 = time.time()
    while not any("'running'" in o[1] for o in job.outputs()) and time.time() - t0 < 60:
        time.sleep(0.05)
    # a second Race in the same tab is refused while the first runs (the first goes on)
    second = finish(client.submit("How can I learn Python?", True, *cfg(max_new=8), api_name="/race"), 30)
    assert not any("Measured" in (o[1] or "") for o in second if o)
    assert not job.done()
    t1 = time.time()
    client.predict(api_name="/race_stop")
    outs = finish(job, 30)
    assert time.time() - t1 < 10
    final = outs[-1][1]
    states = {m[0]: m[1] for m in LANES_RE.findall(final)}
    assert "stopped" in states.values() and "Measured so far (stopped before both finished)" in final
    assert "as far as both got before Stop" in final
    # the tab is free again: a new Race runs to its end
    outs = finish(client.submit("How can I learn Python?", True, *cfg(max_new=6), api_name="/race"))
    assert "Measured:" in outs[-1][1]


@pytest.mark.slow
def test_a_race_counts_among_the_sessions(client):
    """A Race's two decoders are counted in the session store (its stats and its cap) while it runs, and freed
    when it ends."""
    from eagle_core.serving.sessions import SESSIONS
    from servers import cfg
    before = SESSIONS.stats()
    job = client.submit("How can I learn Python?", True, *cfg(max_new=400), api_name="/race")
    t0 = time.time()
    while not any("'running'" in o[1] for o in job.outputs()) and time.time() - t0 < 60:
        time.sleep(0.05)
    during = SESSIONS.stats()
    client.predict(api_name="/race_stop")
    finish(job, 30)
    after = SESSIONS.stats()
    assert (during["sessions"], during["decoders"]) == (before["sessions"] + 1, before["decoders"] + 2), (before, during)
    assert during["running"] == before["running"] + 1
    assert (after["sessions"], after["decoders"]) == (before["sessions"], before["decoders"]), (before, after)
