"""Numbers outside the Lens settings' ranges (issue 38, point 5.1) and lowering max new tokens mid-generation
(point 5.3), through the app's HTTP API on a tiny target: no HTTP 500, no server traceback, the value clamped or
refused with a sentence that says so, and the session's generation kept."""
import uuid

import httpx
import pytest

pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

from servers import app_in_process, cfg  # noqa: E402

pytestmark = pytest.mark.slow       # a whole app in this process, like tests/test_app.py

PROMPT = "How can I learn Python?"


@pytest.fixture(scope="module")
def served():
    """(url, demo): the app in this process, with its Blocks at hand (the fn_index of its private events)."""
    with app_in_process("tiny", with_demo=True) as got:
        yield got


def limit_sliders(demo) -> dict:
    return {b.label: b for b in demo.blocks.values() if getattr(b, "el_limit", False)}


def events_of(demo, block, event: str) -> list[int]:
    return [i for i, d in demo.fns.items() if d.targets and d.targets[0] == (block._id, event)]


def predict(url, fn_index, data, session):
    """What the page sends for an unqueued event (/gradio_api/run/predict)."""
    return httpx.post(f"{url}/gradio_api/run/predict", timeout=30,
                      json=dict(data=data, fn_index=fn_index, session_hash=session, event_data=None))


def test_a_rebuilt_limit_slider_still_passes_out_of_range_numbers(served):
    """gradio rebuilds a component for a session from its constructor arguments when a handler updates one of
    its properties (the note under a slider's label, `interactive`); the rebuilt slider must stay lenient."""
    _, demo = served
    sliders = limit_sliders(demo)
    assert {"Temperature (0 = greedy)", "Max new tokens"} <= set(sliders)
    for b in sliders.values():
        rebuilt = b.__class__(**{**b.constructor_args, "render": False})
        assert rebuilt.preprocess(-1) == -1 and rebuilt.preprocess(100000) == 100000, b.label


def test_typing_out_of_range_numbers_answers_without_a_500(served, capfd):
    """The page's own requests while a number is typed key by key into the temperature and max new tokens boxes
    (each key an `input` event), then Step's normalise: every answer 200, the note beside the buttons says what
    was clamped, and no traceback in the server's output."""
    url, demo = served
    sliders = limit_sliders(demo)
    note = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "el-input-note")
    session = uuid.uuid4().hex
    for label, typed, want in (("Temperature (0 = greedy)", ["-", "-1"], "Temperature -1 is outside 0–2: using 0.0"),
                               ("Max new tokens", ["1", "10", "100", "1000", "10000", "100000"],
                                "Max new tokens 100000 is outside 1–512: using 512")):
        sl = sliders[label]
        fns = events_of(demo, sl, "input")
        for value in typed:
            for fn in fns:
                inputs = [value if x is sl else "" for x in demo.fns[fn].inputs]
                r = predict(url, fn, inputs, session)
                assert r.status_code == 200, (label, value, r.status_code, r.text[:300])
        assert len(fns) == 2, "the note under the label and the note beside the buttons"
        answer = predict(url, fns[1], [typed[-1], ""], session).json()["data"][0]
        assert want in str(answer), answer
    # Step's first request (normalise) with the number as typed, after the slider was rebuilt for this session
    norm = next(i for i, d in demo.fns.items() if getattr(d.fn, "__name__", "") == "on_normalise")
    temp = sliders["Temperature (0 = greedy)"]
    data = [-1 if x is temp else "" if x is note else x.value for x in demo.fns[norm].inputs]
    r = predict(url, norm, data, session)
    assert r.status_code == 200, r.text[:300]
    assert "Temperature -1 is outside 0–2: using 0.0" in str(r.json()["data"]), r.json()["data"]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "is less than minimum" not in err and "greater than maximum" not in err, err


def test_out_of_range_numbers_through_the_api_keep_the_session(served):
    """The API's Step gets the number as sent: refused in the status with the setting and its limits, and the
    session's generation goes on afterwards (not started again)."""
    url, _ = served
    c = Client(url, verbose=False)
    c.predict(PROMPT, True, *cfg(), api_name="/step")
    c.predict(PROMPT, True, *cfg(), api_name="/step")
    before = c.predict(api_name="/session_tokens")
    assert before["cycles"] == 2
    for kw, msg in ((dict(temperature=-1), "Temperature must be between 0 and 2 (got -1"),
                    (dict(temperature=5), "Temperature must be between 0 and 2 (got 5"),
                    (dict(max_new=0), "Max new tokens must be between 1 and 512 (got 0)"),
                    (dict(max_new=100000), "Max new tokens must be between 1 and 512 (got 100000)")):
        out = c.predict(PROMPT, True, *cfg(**kw), api_name="/step")
        assert out[8].startswith("❌") and msg in out[8] and "Traceback" not in out[8], out[8]
    out = c.predict(PROMPT, True, *cfg(), api_name="/step")
    after = c.predict(api_name="/session_tokens")
    assert not out[8].startswith("❌") and "new generation" not in out[8]
    assert after["sid"] == before["sid"] and after["cycles"] == 3
    assert after["token_ids"][:len(before["token_ids"])] == before["token_ids"]
