"""Reset during a Run leaves the reset page, even when the Run's last update comes after Reset's (issue 38, point
5.2); lowering max new tokens keeps the cycles already stepped (point 5.3). Through gradio_client, tiny target."""
import json
import time

import pytest

pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

from servers import app_in_process, cfg, plot  # noqa: E402

pytestmark = pytest.mark.slow       # a whole app in this process, like tests/test_app.py

PROMPT = "How can I learn Python?"


@pytest.fixture(scope="module")
def url():
    with app_in_process("tiny") as u:
        yield u


def step(c, **kw):
    return c.predict(PROMPT, True, *cfg(**kw), api_name="/step")


def tokens(c) -> dict:
    return c.predict(api_name="/session_tokens")


def test_reset_during_a_run_ends_on_the_reset_page(url):
    """The Run's last update reaches the page after Reset's: it shows the reset page too (no tree, no text, no
    "Stopped"), and the session holds no records."""
    c = Client(url, verbose=False)
    job = c.submit(PROMPT, True, *cfg(max_new=400, shape="Chain", depth=1), api_name="/run")
    t0 = time.time()
    while len(job.outputs()) < 2 and time.time() - t0 < 60:
        time.sleep(0.05)
    reset = c.predict(api_name="/reset")
    assert "Reset" in reset[8]
    while not job.done() and time.time() - t0 < 90:
        time.sleep(0.05)
    assert job.done()
    final = job.outputs()[-1]
    assert "Stopped" not in final[8] and "Reset" in final[8], final[8]
    assert "Press Step or Run" in json.dumps(plot(final[3])), "the dead Run's tree is not drawn"
    assert final[0] == reset[0] and "data-cycle=" not in final[0], "the dead Run's text is not shown"
    assert tokens(c)["cycles"] == 0
    out = step(c)                                   # and the tab goes on from the reset state
    assert "prefill" in plot(out[3])["layout"]["title"]["text"]


def test_lowering_max_new_tokens_keeps_the_cycles(url):
    """Lowered above what was generated: the same generation goes on and ends at the new limit, token for token
    what a generation with that limit gives. Lowered below it: it ends there, its cycles kept, and says so."""
    c = Client(url, verbose=False)
    for _ in range(3):
        step(c, max_new=40, shape="Chain", depth=1)
    before = tokens(c)
    assert before["cycles"] == 3
    out = step(c, max_new=8, shape="Chain", depth=1)
    assert "new generation" not in out[8] and "Max new tokens is now 8" in out[8], out[8]
    now = tokens(c)
    assert now["sid"] == before["sid"] and now["cycles"] == 4
    assert now["token_ids"][:len(before["token_ids"])] == before["token_ids"]
    final = c.submit(PROMPT, True, *cfg(max_new=8, shape="Chain", depth=1), api_name="/run").result()
    assert "max new tokens" in final[8]
    kept = tokens(c)["token_ids"]
    fresh = Client(url, verbose=False)
    fresh.submit(PROMPT, True, *cfg(max_new=8, shape="Chain", depth=1), api_name="/run").result()
    assert kept == tokens(fresh)["token_ids"] and len(kept) == 8, "exact: what a generation of 8 tokens gives"

    # below what it has: it ends where it is, nothing thrown away, and the status says so
    d = Client(url, verbose=False)
    for _ in range(4):
        step(d, max_new=40, shape="Chain", depth=1)
    have = tokens(d)
    n = len(have["token_ids"])
    assert n >= 3
    out = step(d, max_new=2, shape="Chain", depth=1)
    assert "Max new tokens is now 2" in out[8] and f"already has {n} new tokens" in out[8], out[8]
    assert tokens(d) == have, "no cycle discarded"
    out = step(d, max_new=2, shape="Chain", depth=1)
    assert "finished" in out[8] and tokens(d) == have
