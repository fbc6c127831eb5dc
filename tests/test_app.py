"""The app through gradio_client: Step, Run, Stop, the toggles, robustness, the Race and the "How can I" view.

The app is launched in-process on a free port with `--target tiny` (a tiny random Llama with the embedded
tokenizer), so the whole file runs in well under a minute on a CPU.
"""
import dataclasses
import json
import os
import time

import pytest

pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

import app  # noqa: E402
import tabs.lab as lab_tab  # noqa: E402
import tabs.lens as lens_tab  # noqa: E402
from eagle_core.serving import generation  # noqa: E402
from eagle_core.serving.sessions import SESSIONS  # noqa: E402
from servers import ROOT, app_in_process, cfg, plot  # noqa: E402
from tabs.common import DEFAULT_PRESET, Settings, normalise  # noqa: E402

PROMPT = "How can I learn Python?"


@pytest.fixture(scope="module")
def url():
    with app_in_process("tiny") as u:
        yield u


@pytest.fixture
def client(url):
    return Client(url, verbose=False)


def trace_names(out):
    return [t.get("name") for t in plot(out)["data"]]


def step(c, prompt=PROMPT, shifted=True, **kw):
    return c.predict(prompt, shifted, *cfg(**kw), api_name="/step")


def test_step_builds_every_view(client):
    out = step(client)                                   # prefill
    assert "prefill" in plot(out[3])["layout"]["title"]["text"]
    out = step(client)                                   # cycle 1: a real tree
    text, cards, slider, tree, node, probs, mask, stats, status = out
    names = trace_names(tree)
    assert "accepted path" in names and "root (last committed token)" in names
    assert any(n and n.startswith(("bonus", "correction")) for n in names)
    assert len(node["choices"]) == 12                    # cpu-12 drafts 12 tokens
    assert plot(mask)["data"][0]["type"] == "heatmap"
    assert "draft q (head)" in trace_names(probs)
    assert "running τ" in trace_names(stats)
    assert "el-tok" in text and "τ" in cards
    assert slider["maximum"] == 1 and slider["value"] == 1
    # go back to cycle 0, then inspect another node of cycle 1
    back = client.predict(0, api_name="/view_cycle")
    assert "prefill" in plot(back[3])["layout"]["title"]["text"]
    other = node["choices"][-1][1]
    again = client.predict(1, other, api_name="/view_node")
    assert again[4]["value"] == other


def test_run_streams_to_the_end(client):
    job = client.submit(PROMPT, True, *cfg(max_new=10), api_name="/run")
    outs = list(job)
    final = job.outputs()[-1]
    assert len(outs) >= 2
    assert "finished" in final[8]
    stats = plot(final[7])
    tokens = next(t for t in stats["data"] if t["name"] == "EAGLE tokens")["y"]
    assert tokens[-1] == 10 or ("eos" in final[8] and tokens[-1] < 10)


def test_toggles_chain_dynamic_unshifted_sampling(client):
    out = step(client, shape="Chain", depth=4)
    out = step(client, shape="Chain", depth=4)
    nodes = out[4]["choices"]
    assert len(nodes) == 4                               # a chain of depth 4
    step(client, shifted=False, tree_kind="dynamic (EAGLE-2)", total=10)
    out = step(client, shifted=False, tree_kind="dynamic (EAGLE-2)", total=10)
    assert len(out[4]["choices"]) == 10
    step(client, temperature=0.8, top_p=0.9, seed=3)
    out = step(client, temperature=0.8, top_p=0.9, seed=3)
    assert "min(1, p/q)" in json.dumps(plot(out[5])["layout"]["annotations"])


def greedy_reference(prompt, n) -> list[int]:
    """Plain greedy decoding (transformers' generate) of the app's target: n tokens of the prompt as the app
    renders it, or fewer when a stop token comes first."""
    import torch
    target = app.MODEL.target
    ids = target.render_prompt(prompt)
    out = target.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                eos_token_id=target.stop_token_ids, pad_token_id=0)
    return out[0, len(ids):].tolist()


def test_dynamic_tree_runs_to_the_end(client):
    """An EAGLE-2 dynamic tree with the unshifted head runs a whole generation at T = 0: it finishes, each cycle
    verified a dynamic tree of at most `total` drafted nodes, and the tokens are plain greedy decoding of the
    same target, max_new_tokens of them (fewer only at a stop token)."""
    job = client.submit(PROMPT, False, *cfg(tree_kind="dynamic (EAGLE-2)", depth=5, top_k=6, total=10, max_new=12),
                        api_name="/run")
    final = list(job)[-1]
    assert "finished" in final[8] and "went wrong" not in final[8]
    got = client.predict(api_name="/session_tokens")
    ref = greedy_reference(PROMPT, 12)
    assert got["token_ids"] == ref, "the dynamic tree's tokens are not greedy decoding's"
    assert got["finished"] == ("max_new_tokens" if len(ref) == 12 else "eos")
    dec = SESSIONS.get(got["sid"]).decoder
    assert (dec.cfg.draft, dec.cfg.total_tokens, dec.head.shift) == ("dynamic", 10, "unshifted")
    assert len(dec.cycles) == got["cycles"] >= 2 and all(1 < len(r.nodes) <= 11 for r in dec.cycles[1:])
    assert sum(len(r.new_tokens) for r in dec.cycles) == len(ref)


def test_settings_change_starts_new_generation(client):
    """A Step with other settings starts a new generation: the status says so, the old tokens are gone (the new
    generation holds only its prefill's token, the prompt's greedy next token), and the session decodes with
    the new settings (a chain of depth 3 in the next cycle's record)."""
    step(client)
    step(client)
    before = client.predict(api_name="/session_tokens")
    ref = greedy_reference(PROMPT, len(before["token_ids"]) + 4)
    assert before["cycles"] == 2 and len(before["token_ids"]) >= 2
    assert before["token_ids"] == ref[:len(before["token_ids"])]
    out = step(client, depth=3, shape="Chain")
    assert "new generation" in out[8]
    after = client.predict(api_name="/session_tokens")
    assert after["sid"] == before["sid"] and after["cycles"] == 1 and after["token_ids"] == ref[:1]
    dec = SESSIONS.get(after["sid"]).decoder
    assert (dec.cfg.draft, dec.cfg.depth) == ("chain", 3)
    assert dec.prompt_ids == app.MODEL.target.render_prompt(PROMPT)
    out = step(client, depth=3, shape="Chain")
    assert len(out[4]["choices"]) == 3
    rec = dec.cycles[1]
    assert [n.depth for n in rec.nodes] == [0, 1, 2, 3] and [n.parent for n in rec.nodes] == [-1, 0, 1, 2]
    now = client.predict(api_name="/session_tokens")["token_ids"]
    assert now == ref[:len(now)] and len(now) == 1 + len(rec.new_tokens)


@pytest.mark.parametrize("prompt,kw,msg", [
    ("", {}, "prompt is empty"),
    ("   ", {}, "prompt is empty"),
    ("x" * 5000, {}, "characters"),
    (PROMPT, dict(seed=-5), "Seed must be between 0 and"),
    (PROMPT, dict(seed=2 ** 40), "Seed must be between 0 and"),
])
def test_bad_inputs_give_messages(client, prompt, kw, msg):
    """Values the API passes straight to the handler (the page normalises them first) are answered in the status."""
    out = step(client, prompt=prompt, **kw)
    assert out[8].startswith("❌") and msg in out[8], out[8]
    assert "Traceback" not in out[8]
    ok = step(client)                                    # still usable
    assert not ok[8].startswith("❌")


def test_out_of_range_slider_is_answered_by_the_handler(client):
    """A slider value outside its range reaches the handler (not gradio's bare "less than minimum value" error),
    which names the setting and its limits in the status; nothing is changed behind the caller's back."""
    for kw, msg in ((dict(max_new=0), "Max new tokens must be between 1 and 512 (got 0)"),
                    (dict(max_new=99999), "Max new tokens must be between 1 and 512 (got 99999)"),
                    (dict(temperature=5), "Temperature must be between 0 and 2 (got 5")):
        out = step(client, **kw)
        assert out[8].startswith("❌") and msg in out[8], out[8]
    assert not step(client)[8].startswith("❌")


def test_a_clamped_slider_says_what_it_changed():
    """A number typed beyond a slider's range is clamped by the browser when the box loses focus; the slider's
    input handler says so under its label at once, with the value used (and the same sentence as the Step's
    note), and an in-range value clears it."""
    from tabs.common import slider_note
    assert slider_note("temperature", None)(5)["info"] == "⚠️ Temperature 5 is outside 0–2: using 2.0."
    assert "using 1." in slider_note("max_new_tokens", None)(0)["info"]
    assert "Max new tokens 99999 is outside 1–512: using 512." in slider_note("max_new_tokens", None)(99999)["info"]
    assert slider_note("max_new_tokens", "tip")(64)["info"] == "tip"
    demo = app.build_demo()
    sliders = [b for b in demo.blocks.values() if getattr(b, "el_limit", False)]
    labels = {b.label for b in sliders}
    assert {"Temperature (0 = greedy)", "Max new tokens"} <= labels
    assert all(b.preprocess(5000) == 5000 for b in sliders)   # passed on to the handler, not refused
    inputs = {d.targets[0][0] for d in demo.fns.values() if d.targets and d.targets[0][1] == "input"}
    assert all(b._id in inputs for b in sliders), "every limit slider reports a clamp as it is typed"


def test_out_of_order_buttons_and_reset(client):
    assert "Nothing is running" in client.predict(api_name="/stop")
    out = client.predict(3, api_name="/view_cycle")     # the recorded trace (or nothing) - no error
    assert not str(out[8]).startswith("❌")
    out = client.predict(api_name="/reset")
    assert "Reset" in out[8]
    out = client.predict(0, api_name="/view_cycle")
    assert "Press Step" in json.dumps(plot(out[3]))
    out = step(client)
    assert "prefill" in plot(out[3])["layout"]["title"]["text"]


def test_stop_in_the_middle_of_a_run(client):
    job = client.submit(PROMPT, True, *cfg(max_new=400, shape="Chain", depth=1), api_name="/run")
    t0 = time.time()
    while len(job.outputs()) < 3 and time.time() - t0 < 60:
        time.sleep(0.05)
    client.predict(api_name="/stop")
    while not job.done() and time.time() - t0 < 90:
        time.sleep(0.05)
    final = job.outputs()[-1]
    assert "Stopped" in final[8]
    stats = plot(final[7])
    assert next(t for t in stats["data"] if t["name"] == "EAGLE tokens")["y"][-1] < 400
    out = step(client, max_new=400, shape="Chain", depth=1)  # continues the same generation
    assert not out[8].startswith("❌")


def test_reset_during_a_run(client):
    job = client.submit(PROMPT, True, *cfg(max_new=400, shape="Chain", depth=1), api_name="/run")
    t0 = time.time()
    while len(job.outputs()) < 2 and time.time() - t0 < 60:
        time.sleep(0.05)
    client.predict(api_name="/reset")
    while not job.done() and time.time() - t0 < 90:
        time.sleep(0.05)
    assert "went wrong" not in str(job.outputs()[-1][8])
    out = step(client)
    assert "prefill" in plot(out[3])["layout"]["title"]["text"]


def test_two_sessions_keep_their_own_state(url):
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    for _ in range(3):
        step(a)
    out_b = step(b, prompt="What is 2 + 2?")
    assert out_b[2]["maximum"] == 1 and "prefill" in plot(out_b[3])["layout"]["title"]["text"]
    out_a = step(a)
    assert out_a[2]["value"] == 3
    assert "2 + 2" in out_b[0] and "2 + 2" not in out_a[0]


def test_race_and_ambiguity(client):
    fig, msg = client.predict(PROMPT, True, *cfg(max_new=8), api_name="/race")
    assert "Race" in msg and "identical text" in msg
    assert "speedup" in plot(fig)["layout"]["title"]["text"]
    fig, dist, table, msg, headline, payoff = client.predict("How can I", 3, api_name="/ambiguity")[:6]
    table0 = table
    names = " ".join(n or "" for n in trace_names(fig))
    assert "shifted head" in names and "unshifted head" in names and "real feature" in names
    assert len(plot(dist)["data"]) == 9
    # one measure in the headline and the text; the payoff: real EAGLE cycles per branch and head
    assert "draft probability" in table and "of 3 branches" in headline and "In tokens:" in headline
    assert {t["name"] for t in plot(payoff)["data"]} == {"shifted head", "unshifted head"}
    assert msg.startswith("Computed")
    fig, dist, table, msg = client.predict("How can I", 3, True, api_name="/ambiguity")[:4]
    assert "chat template" in table and msg.startswith("Computed")
    msg = client.predict("", 3, api_name="/ambiguity")[3]
    assert msg.startswith("❌")
    # the same question again (a class pressing Compute): read from the one computation, the same record
    again = client.predict("How can I", 3, api_name="/ambiguity")
    assert "once for everyone" in again[3] and again[2] == table0 and again[4] == headline
    # more branches than the tab draws: brought to 6, and said so (the browser's slider clamped it silently)
    _, _, _, msg, headline = client.predict("How can I", 99, api_name="/ambiguity")[:5]
    assert "⚠️ Branches 99 is outside 2–6: using 6." in msg and "of 6 branches" in headline, (msg, headline)


def test_walkthrough(client):
    from views.walkthrough import STEPS
    md, fig, msg, *_ = client.predict(STEPS[4]["title"], api_name="/walk_select")
    assert "shifted" in md
    fig, msg, _ = client.predict(STEPS[1]["title"], api_name="/walk_live")
    assert msg.startswith("Live") and "accepted path" in trace_names(fig)


def test_ambiguity_matches_the_drafters_convention(url):
    """What "How can I" shows each head predicting after a branch t is what a generation's own drafter (the
    device's default: on a CPU an 8192-token draft vocabulary, a bf16 draft LM head) drafts from when t is the
    root: the engine's first cycle after a prefill that picked t. The unshifted head's guess is one for every t."""
    import torch

    from eagle_core.decoding.ambiguity import _features, compute_ambiguity
    from eagle_core.decoding.engine import EagleDecoder, default_config
    target, heads = app.MODEL.target, app.MODEL.heads
    ids = target.render_prompt("How can I", chat_template=False)
    cfg = dataclasses.replace(default_config(target.device.type, target.numerics), draft="chain", depth=1,
                              temperature=0.0, max_new_tokens=4)
    fs = _features(target, heads["shifted"], heads["unshifted"], None, ids, 2, cfg)
    for name, pred, q in (("shifted", fs.sh[0], fs.sh_next[0]), ("unshifted", fs.un[0], fs.un_next)):
        dec = EagleDecoder(target, heads[name], cfg, ids)
        dec.step()                                    # the prefill picks the argmax: the first branch
        assert dec.new_ids == [fs.branch_ids[0]]
        with torch.inference_mode():
            res = dec._cycle()
        assert torch.allclose(q, res.tree.dists[0].float().exp(), atol=1e-5), name
        if cfg.draft_vocab:
            assert int((q > 0).sum()) <= cfg.draft_vocab, name
    other = _features(target, heads["shifted"], heads["unshifted"], None, ids, 3, cfg)
    assert torch.equal(other.un, fs.un)               # one guess whatever the branch
    rec = compute_ambiguity(target, heads["shifted"], heads["unshifted"], "How can I", 3)
    assert len(rec.branches) == 3 and rec.last_token.strip() == "I"
    assert all(br.vocab and len(br.vocab) == len(br.vocab_shifted) for br in rec.branches)
    for br in rec.branches:  # the nearest-branch check agrees with the distances it reports
        assert abs(br.dist_to_branches[rec.branches.index(br)] - br.dist_shifted) < 1e-3
        assert br.nearest_branch == min(range(3), key=lambda c: br.dist_to_branches[c])
    assert 0 <= rec.unshifted_nearest < 3
    with pytest.raises(ValueError):
        compute_ambiguity(target, heads["shifted"], heads["unshifted"], "  ")


def test_walkthrough_settings_open_in_lens(client):
    from views.walkthrough import STEPS
    out = client.predict(STEPS[6]["title"], api_name="/walk_apply")
    assert out[2] > 0 and out[5] == "Tree"       # step 7: temperature > 0 (outputs: the Lens settings in order)
    out = client.predict(STEPS[5]["title"], api_name="/walk_apply")
    assert out[5] == "Chain"        # step 6's figure is the tree (recorded): the Lens gets the chain beside it
    md, fig, msg, count, side, more, *_ = client.predict(STEPS[5]["title"], api_name="/walk_select")
    assert DEFAULT_PRESET in more and "chain of depth 5" not in more   # the figure's settings named are those used
    assert "Opens a chain of 5" in more


def test_open_these_settings_shows_a_cycle_at_those_settings(client):
    """Step 7's "Open these settings" leaves no T = 0 run on screen: the Lens tab shows, at once, the cycle the
    step's figure showed, from the recorded run decoded with exactly those settings, and says so."""
    from views.walkthrough import STEPS
    out = client.predict(STEPS[6]["title"], api_name="/walk_apply")
    assert out[2] == 0.8                                    # temperature
    plots = [plot(o) for o in out if isinstance(o, dict) and "plot" in o]
    titles = [p["layout"].get("title", {}).get("text") or "" for p in plots]
    assert any(t.startswith("Cycle 24:") for t in titles), titles     # the step's cycle, in the Lens tree
    status = next(o for o in out if isinstance(o, str) and "Step 7's settings" in o)
    assert "recorded run (cycle 24" in status and "Step or Run decodes them live" in status
    # the text panel names that recording (its time), not the default recording shown at first paint
    text = next(o for o in out if isinstance(o, str) and "Recorded example" in o)
    assert json.load(open(os.path.join(ROOT, "assets", "trace_temperature.json")))["recorded"] in text


def test_walkthrough_figure_is_labelled_recorded_or_live():
    """The figure's label says what it shows (a recorded run, a live one, nothing yet), never "Live view" above a
    recording."""
    from tabs.walkthrough import LIVE, MEASURED, NOTHING, RECORDED, figure_label, select
    assert figure_label(select(1)[2]) == RECORDED and select(1)[2].startswith("Recorded")
    assert figure_label("Live: 3 cycles") == LIVE and figure_label("No recorded run") == NOTHING
    assert figure_label("⏳ Decoding live: 5 tokens…") is None          # a progress note leaves the label alone
    demo = app.build_demo()
    fig = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "el-walk-fig")
    assert fig.label == MEASURED                     # step 1: the benchmark's pass-cost table


# ----------------------------------------------------------------------------- a classroom on one machine
@pytest.fixture
def slow_cycles(monkeypatch):
    """Each model cycle takes `delay[0]` s longer (a real model's order of magnitude), inside its model turn, so
    the timing across sessions is measurable with the tiny target."""
    from eagle_core.decoding import batch
    delay = [0.04]
    real, real_round = generation.advance, batch.step_together

    def slow(*args, **kw):
        time.sleep(delay[0])
        return real(*args, **kw)

    def slow_round(*args, **kw):      # a round of the engine loop (serving/rounds.py): one cycle each, as it is called
        time.sleep(delay[0])
        return real_round(*args, **kw)
    monkeypatch.setattr(generation, "advance", slow)
    monkeypatch.setattr(batch, "step_together", slow_round)
    return delay


def running_decoder_cycles() -> int:
    """Cycles decoded so far by the Run in progress on the server (this process), read from its decoder."""
    ents = [e for e in list(SESSIONS.entries.values()) if e.running == "run"]
    return len(ents[0].decoder.cycles) if ents else 0


def wait_outputs(job, n, limit=60):
    t0 = time.time()
    while len(job.outputs()) < n and not job.done() and time.time() - t0 < limit:
        time.sleep(0.02)


def test_a_step_answers_while_another_session_runs(url, slow_cycles, host_pass_s):
    """Fair sharing: a Run yields the model between cycles, so another student's Step waits for at most a few
    cycles, not for the whole generation."""
    # Counted in the Run's cycles, the Step's wait is its round trip (a few host passes) over a cycle's length: with
    # a fixed 0.04 s cycle that count grew with the host's slowness (12 cycles, over the 8 allowed, on this host
    # under load, 110 ms a pass). A cycle of 2 host passes (a real model's order) keeps it host-independent; the
    # bug (the Step waits for the whole Run) costs the Run's hundreds of cycles
    slow_cycles[0] = max(0.04, 2 * host_pass_s)
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    job = a.submit(PROMPT, True, *cfg(max_new=300, shape="Chain", depth=1), api_name="/run")   # ~300 cycles
    wait_outputs(job, 2)
    step(b)                                                   # prefill
    run_cycles = running_decoder_cycles
    before = run_cycles()
    t0 = time.time()
    out = step(b)
    after = run_cycles()
    print(f"\n[timing] a Step beside a Run: {time.time() - t0:.2f} s, {after - before} of the Run's cycles of "
          f"{slow_cycles[0]:.2f} s (allowed 8; a host pass {1e3 * host_pass_s:.0f} ms)")
    assert not job.done(), "the Run must still be streaming"
    assert "Cycle 1" in plot(out[3])["layout"]["title"]["text"]
    # interleaving, by order not by the clock: the Step waited only a few of the Run's cycles, not all of them
    assert after - before <= 8, f"a Step waited {after - before} cycles of the Run"
    t0 = time.time()
    while run_cycles() <= after and not job.done() and time.time() - t0 < 30:
        time.sleep(0.02)
    assert run_cycles() > after, "the Run goes on after the Step"
    a.predict(api_name="/stop")
    job.result()


def test_stop_ends_a_run_within_a_cycle(client, slow_cycles):
    job = client.submit(PROMPT, True, *cfg(max_new=400, shape="Chain", depth=1), api_name="/run")
    wait_outputs(job, 3)
    ent = next(e for e in list(SESSIONS.entries.values()) if e.running == "run")
    client.predict(api_name="/stop")
    at_stop = len(ent.decoder.cycles)                          # Stop is set: from here at most one cycle more
    t0 = time.time()
    while not job.done() and time.time() - t0 < 30:
        time.sleep(0.01)
    assert "Stopped" in job.outputs()[-1][8]
    final = client.predict(api_name="/session_tokens")["cycles"]
    assert final - at_stop <= 1, f"Stop let {final - at_stop} more cycles run (at most the one in progress)"


def test_waiting_student_sees_the_queue(url, slow_cycles, host_pass_s):
    # one cycle longer than the 1 s before the first note, by more than b's way to the queue (a's update, the
    # 0.1 s, b's request: ~0.2 s here) on a host 4x slower: 10 host passes, at least 0.6 s
    slow_cycles[0] = 1.0 + max(0.6, 10 * host_pass_s)
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    step(b)
    job = a.submit(PROMPT, True, *cfg(max_new=40, shape="Chain", depth=1), api_name="/run")
    wait_outputs(job, 1, limit=slow_cycles[0] + 60)
    time.sleep(0.1)
    sjob = b.submit(PROMPT, True, *cfg(), api_name="/step")
    sjob.result()
    statuses = [o[8] for o in sjob.outputs()]
    assert any("Waiting for the shared model" in str(s) for s in statuses), statuses
    a.predict(api_name="/stop")
    job.result()


def test_finished_generation_is_kept(client):
    final = client.submit(PROMPT, True, *cfg(max_new=6), api_name="/run").result()
    assert "finished" in final[8]
    before = client.predict(api_name="/session_tokens")
    assert len(before["token_ids"]) == 6 or before["finished"] == "eos"
    out = step(client, max_new=6)                             # a Step after the end: the text stays
    assert "finished" in out[8] and not out[8].startswith("❌")
    assert client.predict(api_name="/session_tokens")["token_ids"] == before["token_ids"]
    client.predict(api_name="/reset")
    assert "prefill" in plot(step(client, max_new=6)[3])["layout"]["title"]["text"]


def test_idle_session_expires_with_a_message(client, monkeypatch):
    step(client)
    step(client)
    monkeypatch.setattr(SESSIONS, "idle_timeout", 0.01)
    time.sleep(0.05)
    assert SESSIONS.sweep() >= 1
    stats = client.predict(api_name="/server_stats")
    assert stats["rss_mb"] > 0 and "decoders" in stats
    out = step(client)
    assert "idle" in out[8] and "prefill" in plot(out[3])["layout"]["title"]["text"]
    step(client)
    time.sleep(0.05)
    assert SESSIONS.sweep() >= 1
    final = client.submit(PROMPT, True, *cfg(max_new=6), api_name="/run").result()   # a Run is told too
    assert "idle" in final[8], final[8]


def test_tokens_per_second_cards_are_labelled(client):
    final = client.submit(PROMPT, True, *cfg(max_new=8), api_name="/run").result()
    cards = final[1]
    assert "tokens/s on this page" in cards and "tokens/s of the engine" in cards


def test_play_the_cycle_in_beats(client, monkeypatch):
    monkeypatch.setattr(lens_tab, "BEAT_SECONDS", 0.05)
    step(client)
    step(client)
    job = client.submit(1, api_name="/play")
    job.result()
    captions = [b[1] for b in job.outputs()]
    assert any("Draft, level 1" in c for c in captions) and any("Verify" in c for c in captions)
    assert "Accept" in captions[-1]
    fig, cap = client.predict(1, api_name="/beat_prev")
    assert "Verify" in cap
    fig, cap = client.predict(1, api_name="/beat_prev")
    assert "Draft" in cap
    assert "Not playing" in client.predict(api_name="/pause")


def test_inputs_are_answered_not_silently_clamped():
    """Out-of-range numbers are brought into range and the page says so; the boxes get the values used."""
    used, note = normalise(Settings(prompt="x" * 6000, temperature=5, top_p=1.0, seed=-7, depth=0, max_new_tokens=9999))
    assert len(used.prompt) == generation.MAX_PROMPT_CHARS and "6,000 characters" in note
    assert (used.temperature, used.seed, used.depth, used.max_new_tokens) == (2.0, 7, 1, 512)
    assert "Temperature 5 is outside" in note and "Seed -7 is negative" in note and "Max new tokens 9999" in note
    assert normalise(Settings(prompt="ok", temperature=0.5, seed=3))[1] == ""
    used, note = normalise(Settings(top_p=0.01))                  # the one table: the slider's minimum is the engine's
    assert used.top_p == 0.05 and "Top-p 0.01 is outside 0.05–1" in note
    used.config()                                                 # what normalise returns, the engine accepts


def test_only_applicable_controls_are_enabled():
    on = lens_tab.control_states("Tree", "static (EAGLE-1)")
    assert on["preset"] and not on["depth"] and not on["top_k"]
    on = lens_tab.control_states("Tree", "dynamic (EAGLE-2)")
    assert not on["preset"] and on["depth"] and on["top_k"] and on["total_tokens"]
    on = lens_tab.control_states("Chain", "dynamic (EAGLE-2)")
    assert not on["tree_kind"] and not on["preset"] and on["depth"] and not on["top_k"]


# A Stop while queued costs the /stop round trip and the queued request's last update, a few host passes (0.3-0.5 s,
# 3-6 passes of 89 ms, here); it is allowed STOP_QUEUED_PASSES. The bug these tests guard, a stopped request that
# waits for its turn first, costs the rest of the other student's cycle in progress: that cycle is made long in host
# passes (queued_cycle_s: 4 s, or 1 s for the queue note plus 2x the allowance), so the bug always costs more than the
# allowance and the allowance holds on a host 4x slower than this one.
STOP_QUEUED_PASSES = 20


def queued_cycle_s(host_pass_s: float) -> float:
    return max(4.0, 1.0 + 2 * STOP_QUEUED_PASSES * host_pass_s)


def wait_for_queue_note(job, limit=60):
    """Until the job's status says it waits for the shared model (the note comes 1 s into the wait: tabs/lens.py);
    `limit` only bounds a hang."""
    t0 = time.time()
    while not any("Waiting for the shared model" in str(o[8]) for o in job.outputs()) and time.time() - t0 < limit:
        time.sleep(0.02)


def test_stop_while_waiting_for_the_model(url, slow_cycles, host_pass_s):
    """A second Run queues behind the first one's round: it says so, its request waits in the engine loop's queue
    and its decoder has run no cycle. Stop ends it while it waits: it leaves the queue before the cycle it waited
    behind is over (a stopped Run does not wait for its turn first), never runs a cycle, and the first Run goes
    on."""
    from eagle_core.serving.rounds import LOOP
    slow_cycles[0] = queued_cycle_s(host_pass_s)             # a's cycles: b's turn that far away (its note after 1 s)
    allowed = STOP_QUEUED_PASSES * host_pass_s
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    job_a = a.submit(PROMPT, True, *cfg(max_new=60, shape="Chain", depth=1), api_name="/run")
    job_b = None
    try:
        wait_outputs(job_a, 1, limit=slow_cycles[0] + 60)    # a's first cycle, then only a hang bound
        ent_a = next(e for e in list(SESSIONS.entries.values()) if e.running == "run")
        job_b = b.submit(PROMPT, True, *cfg(max_new=60, shape="Chain", depth=1), api_name="/run")
        wait_for_queue_note(job_b)
        waits = [str(o[8]) for o in job_b.outputs() if "Waiting for the shared model" in str(o[8])]
        assert waits, "the second Run never waited for the model"
        assert "1 request ahead of you" in waits[-1], waits[-1]            # behind a's cycle, nobody else
        ent_b = next(e for e in list(SESSIONS.entries.values()) if e.running == "run" and e is not ent_a)
        assert LOOP.waiting() == 1 and ent_b.decoder.cycles == [], "the second Run is not queued"
        a_cycles = len(ent_a.decoder.cycles)
        t0 = time.time()
        b.predict(api_name="/stop")
        job_b.result()
        took = time.time() - t0
        print(f"\n[timing] queued Run's Stop: {took:.2f} s = {took / host_pass_s:.1f} host passes of "
              f"{1e3 * host_pass_s:.0f} ms (allowed {STOP_QUEUED_PASSES}; the other Run's cycle "
              f"{slow_cycles[0]:.1f} s)")
        assert "Stopped" in job_b.outputs()[-1][8] and took < allowed, \
            f"Stop took {took:.2f} s while queued, {took / host_pass_s:.1f} host passes (allowed " \
            f"{STOP_QUEUED_PASSES}; a cycle of the other Run takes {slow_cycles[0]:.1f} s)"
        assert len(ent_a.decoder.cycles) == a_cycles, "the stopped Run waited for the cycle in progress to end"
        assert ent_b.decoder.cycles == [] and ent_b.running is None and LOOP.waiting() == 0
        assert not job_a.done(), "the first Run must go on"
    finally:                                                  # pass or fail, no Run is left holding the model
        for c, job in ((b, job_b), (a, job_a)):
            if job is not None and not job.done():
                c.predict(api_name="/stop")
                job.result()


def test_paper_lab_live_recompute_and_session_histogram(client):
    """The Paper lab tab: a live recompute on two prompts redraws every measured panel (the four input kinds with
    random stand-ins on the tiny target, said so); bad input is answered in the page; the session histogram reads
    this session's own cycles."""
    inputs, inputs_narrow, taus, table, tree, tree_md, heat, rel, pos_md, hist, bench_hist, msg = client.predict(
        "Say hi.\nCount to three.", 5, api_name="/lab_recompute")
    assert msg.startswith("Recomputed live on 2 prompts") and f"{2 * len(lab_tab.LAB_PLAN_NAMES)} generations" in msg
    assert "asked for 5; ran 2" in msg                                           # what was cut is said
    assert "Random stand-ins" in msg and "token-only" in msg                     # the tiny target: said, not hidden
    names = {t.get("name") for t in plot(inputs)["data"]}
    assert {t.get("orientation") for t in plot(inputs_narrow)["data"]} == {"h"}   # a phone's: the bars lie down
    assert {"feature & shifted token", "feature & unshifted token", "token only", "feature only"} <= names
    assert len(plot(taus)["data"]) == 4 and "plain" in plot(taus)["data"][0]["text"][0]
    assert "| token only |" in table and "1.5×" in table and "What it shows" in table   # the paper's Fig. 4 beside
    assert len(plot(tree)["data"][0]["x"]) == 2 and "What it shows" in tree_md and "+0.74" in tree_md
    assert "sibling rank" in pos_md
    assert plot(heat)["data"][0]["type"] == "heatmap"
    assert any("calibration" in (t.get("name") or "") for t in plot(rel)["data"])
    assert any("Fig. 6" in (t.get("name") or "") for t in plot(rel)["data"])      # the paper's two points
    assert plot(hist)["data"][0]["type"] == "bar" and "benchmark" in plot(bench_hist)["layout"]["title"]["text"]
    *_, msg = client.predict("   ", 3, api_name="/lab_recompute")
    assert msg.startswith("❌") and "at least one prompt" in msg
    _, msg = client.predict(api_name="/lab_session")
    assert msg.startswith("The recorded run's") or "no drafting cycles yet" in msg   # before any Step: not "live"
    step(client)
    step(client)
    hist, msg = client.predict(api_name="/lab_session")
    assert msg.startswith("This session's 1 cycle,") and plot(hist)["data"][0]["type"] == "bar"


def test_paper_lab_paints_from_the_shipped_json():
    if lab_tab.LAB is None:
        pytest.skip("no assets/lab.json shipped")
    figs = lab_tab.lab_figures(lab_tab.LAB)
    assert figs["heat"].data[0].type == "heatmap" and len(figs["heat"].data[0].x) > 5   # EAGLE-1's tree positions
    assert "phase" in figs["data"] and "target’s own answers" in figs["data"]
    assert "fastest" in figs["sizes"]
    kinds = {t.name for t in figs["inputs"].data}
    assert kinds == {"feature & shifted token", "feature & unshifted token", "token only", "feature only"}
    assert "held-out 0-α" in figs["inputs_md"] and "What it shows" in figs["inputs_md"]
    assert "benchmark" in figs["bench_hist"].layout.title.text
    if lab_tab.BENCH_HIST:   # the benchmark's own histograms (bench_sets JSONs that carry accept_length_counts)
        assert all(sum(v["counts"]) > 0 for v in lab_tab.BENCH_HIST.values())
    assert "Measured by `python -m eagle_core.lab" in lab_tab.lab_source(lab_tab.LAB)


def test_a_second_step_in_the_same_tab_does_not_replace_the_first(client):
    """A double click: while the first Step waits for the model, the second is told the tab is busy, and the
    first one's decoder is not replaced under it."""
    from eagle_core.serving.turns import MODEL_LOCK
    step(client)                                              # prefill: the tab has a generation
    ticket = MODEL_LOCK.request()                             # someone else's cycle holds the model
    assert ticket.wait(10)
    try:
        first = client.submit(PROMPT, True, *cfg(), api_name="/step")
        wait_for_queue_note(first)
        second = step(client)
        assert "busy with a Step" in second[8], second[8]
    finally:
        MODEL_LOCK.cancel(ticket)                             # a granted ticket: gives the turn back
    out = first.result()
    assert "Cycle 1" in plot(out[3])["layout"]["title"]["text"] and not out[8].startswith("❌")


# ----------------------------------------------------------------------------- staying bounded (issue 37, point 5)
@pytest.fixture(scope="module")
def demo():
    return app.build_demo()


def test_the_page_state_is_small_and_expires(demo):
    """gradio deep-copies a gr.State's initial value into every session and keeps a session's state until its
    time_to_live: the recorded run the page shows first is named in the state, not copied (every session's copy
    is small), and the state expires some time after the sessions' idle timeout (an API client never closes its
    tab). The page still paints the recorded run from it."""
    import copy
    import math
    import pickle

    import gradio as gr
    st = next(b for b in demo.blocks.values() if isinstance(b, gr.State))
    size = len(pickle.dumps(copy.deepcopy(st.value)))
    assert size < 10_000, f"every session deep-copies {size:,} bytes of page state"
    assert SESSIONS.idle_timeout < st.time_to_live < math.inf, st.time_to_live
    state = copy.deepcopy(st.value)
    c0 = lens_tab.first_cycle(lens_tab.shown(state))
    page = lens_tab.paint(state, cycle=c0)
    assert c0 > 0 and "Recorded example" in page["text"] and "el-tok" in page["text"]
    assert "accepted path" in [t.name for t in page["tree"].data]


def test_the_prompt_is_capped_in_tokens(client):
    """The prompt's cap is in tokens of the rendered prompt: 840 characters of CJK (under the character cap) are
    some 1,700 tokens, one long prefill that everyone else would wait behind. Step and Race say the cap and the
    count."""
    prompt = "汉字" * 420
    n = len(app.MODEL.target.render_prompt(prompt))
    out = step(client, prompt=prompt)
    assert out[8].startswith("❌") and f"{n:,} tokens" in out[8], out[8]
    cap = generation.MAX_PROMPT_TOKENS
    assert len(prompt) < generation.MAX_PROMPT_CHARS and n > cap and f"limit is {cap:,} tokens" in out[8]
    fig, board = client.predict(prompt, True, *cfg(max_new=4), api_name="/race")
    assert f"limit is {cap:,} tokens" in board
    assert not step(client)[8].startswith("❌")                  # still usable


def test_old_cycles_keep_their_text_and_statistics_not_their_tree(client):
    """A Run with an 80-node dynamic tree: the session keeps every node and distribution of its last KEEP_DETAIL
    cycles only (its decoder and its page state); an older cycle still shows in the text and the statistics, and
    its figures say its tree was not kept; the latest cycles draw in full."""
    final = client.submit(PROMPT, True, *cfg(tree_kind="dynamic (EAGLE-2)", depth=8, top_k=10, total=80, max_new=48),
                          api_name="/run").result()
    assert "finished" in final[8], final[8]
    got = client.predict(api_name="/session_tokens")
    k = getattr(generation, "KEEP_DETAIL", 16)
    dec = SESSIONS.get(got["sid"]).decoder
    assert len(dec.cycles) == got["cycles"] > k + 2
    assert max(len(r.nodes) for r in dec.cycles[-k:]) > 40
    assert all(len(r.nodes) == 1 + r.accept_length and not r.residual_topk for r in dec.cycles[1:-k]), \
        [len(r.nodes) for r in dec.cycles]
    stats = plot(final[7])
    assert next(t for t in stats["data"] if t["name"] == "EAGLE tokens")["y"][-1] == len(got["token_ids"])
    assert "data-cycle='1'" in final[0]                          # the oldest cycles are in the text
    old = client.predict(1, api_name="/view_cycle")
    assert "was not kept" in json.dumps(plot(old[3])) and old[4]["choices"] == []
    assert "data-cycle='1'" in old[0] and "τ" in old[1]
    fig, cap = client.predict(1, api_name="/beat_next")
    assert "was not kept" in cap
    new = client.predict(got["cycles"] - 1, api_name="/view_cycle")
    assert "accepted path" in trace_names(new[3]) and new[4]["choices"]


def test_play_waits_between_beats_without_a_worker_thread(demo, monkeypatch):
    """/play animates a cycle with a pause between beats: it waits on the event loop (an async generator), not
    in a worker thread per request, and at most PLAY_LIMIT play at once (more queue); many Plays at once take
    about one Play's time."""
    import asyncio
    import inspect
    fn = next(f for f in demo.fns.values() if f.api_name == "play")
    assert fn.concurrency_limit is not None and fn.concurrency_limit <= SESSIONS.max_sessions, fn.concurrency_limit
    assert inspect.isasyncgenfunction(fn.fn), "each Play holds a worker thread while it sleeps between beats"
    lens = fn.fn.__self__
    monkeypatch.setattr(lens_tab, "BEAT_SECONDS", 0.2)
    states = [lens_tab.initial_state() for _ in range(12)]
    cycle = lens_tab.first_cycle(lens_tab.shown(states[0]))

    async def play_all():
        async def one(st):
            return [u async for u in lens.on_play(st, cycle)]
        return await asyncio.gather(*[one(st) for st in states])
    t0 = time.perf_counter()
    outs = asyncio.run(play_all())
    took = time.perf_counter() - t0
    try:
        beats = len(outs[0])
        print(f"\n[timing] 12 Plays of {beats} beats: {took:.2f} s (one: {0.2 * (beats - 1):.1f} s of pauses)")
        assert beats > 3 and all(len(o) == beats for o in outs)
        assert took < 0.2 * beats + 3, f"12 Plays took {took:.1f} s, one takes {0.2 * (beats - 1):.1f} s"
    finally:
        for st in states:
            SESSIONS.drop(st.get("sid"))


def test_stop_ends_a_step_waiting_for_the_model(url, slow_cycles, host_pass_s):
    """A Step queued behind another student's cycle: Stop ends it at once (it leaves the queue), no cycle run."""
    from eagle_core.serving.rounds import LOOP
    slow_cycles[0] = queued_cycle_s(host_pass_s)             # the queue note comes after 1 s (tabs/lens.py)
    allowed = STOP_QUEUED_PASSES * host_pass_s
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    step(b)                                                   # b's prefill
    cycles_b = b.predict(api_name="/session_tokens")["cycles"]
    job_a = a.submit(PROMPT, True, *cfg(max_new=60, shape="Chain", depth=1), api_name="/run")
    try:
        wait_outputs(job_a, 1, limit=slow_cycles[0] + 60)    # a's first cycle, then only a hang bound
        ent_a = next(e for e in list(SESSIONS.entries.values()) if e.running == "run")
        job_b = b.submit(PROMPT, True, *cfg(), api_name="/step")
        wait_for_queue_note(job_b)
        assert LOOP.waiting() == 1, "the Step is not queued"
        a_cycles = len(ent_a.decoder.cycles)
        t0 = time.time()
        b.predict(api_name="/stop")
        job_b.result()
        took = time.time() - t0
        print(f"\n[timing] queued Step's Stop: {took:.2f} s = {took / host_pass_s:.1f} host passes of "
              f"{1e3 * host_pass_s:.0f} ms (allowed {STOP_QUEUED_PASSES}; the other Run's cycle "
              f"{slow_cycles[0]:.1f} s)")
        assert "Stopped" in str(job_b.outputs()[-1][8]) and took < allowed, \
            (f"{took:.2f} s = {took / host_pass_s:.1f} host passes, allowed {STOP_QUEUED_PASSES}",
             [o[8] for o in job_b.outputs()][-2:])
        assert len(ent_a.decoder.cycles) == a_cycles, "the stopped Step waited for the cycle in progress to end"
        assert b.predict(api_name="/session_tokens")["cycles"] == cycles_b
        assert LOOP.waiting() == 0 and not job_a.done()
    finally:
        if not job_a.done():
            a.predict(api_name="/stop")
            job_a.result()


def test_the_banner_names_the_targets_numerical_model(url, monkeypatch):
    """The live banner says which numerical model the target's linear layers run on a CPU and why (the kernel
    plan's words: the 4-bit blocks where they were timed faster, else fp32 and why not the blocks)."""
    from tabs.page import model_banner
    target = app.MODEL.target
    monkeypatch.setattr(target, "kernel_plan", {"layers": 5, "precision": "q4", "mode": "auto",
                                                "q4_ms": {1: 12.5}, "ms": {1: [40.0, 41.0]}})
    assert "(the GGUF's own 4-bit blocks (timed faster here: a one-token pass 12.5 ms against 40.0 ms on fp32))" \
        in model_banner()[0]
    monkeypatch.setattr(target, "kernel_plan", {"layers": 5, "precision": "fp32", "mode": "auto",
                                                "q4_refused": "timed slower here (a one-token pass 50.0 ms ...)"})
    assert "(fp32 linear layers; 4-bit blocks not taken: timed slower here" in model_banner()[0]
