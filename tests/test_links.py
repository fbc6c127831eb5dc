"""tabs/links.py: what a deep link's parameters open, and what it says of a value it could not use (the browser side:
tests/test_browser_links.py)."""
import json

from tabs.links import FROM_URL, OTHER, link_defaults, marker_html, parse_link
from tabs.common import SETTING_NAMES, Settings


def test_a_step_opens_the_walkthrough():
    page, settings, notes = parse_link({"step": "4"}, 7)
    assert page == {"tab": "walk", "step": 3} and settings is None and notes == []
    assert parse_link({"tab": "lab"}, 7) == ({"tab": "lab"}, None, [])
    assert parse_link({"tab": "How can I"}, 7)[0] == {"tab": "amb"}


def test_settings_open_the_lens_with_them():
    page, s, notes = parse_link({"prompt": "Bonjour à tous", "temperature": "0.8", "shape": "chain",
                                 "tree": "dynamic", "shifted": "0", "seed": "7", "cycle": "2", "presenter": "1"}, 7)
    assert notes == [] and page == {"tab": "lens", "cycle": 2, "presenter": True}
    assert (s.prompt, s.temperature, s.shape, s.tree_kind, s.shifted, s.seed) == \
        ("Bonjour à tous", 0.8, "Chain", "dynamic (EAGLE-2)", False, 7)
    assert s.top_k == Settings().top_k                     # what the link leaves out keeps the page's default


def test_bad_values_are_brought_inside_and_said():
    page, s, notes = parse_link({"temperature": "9", "step": "99", "tab": "nope", "colour": "red",
                                 "shape": "circle", "seed": "x", "prompt": "p" * 5000, "cycle": "-"}, 7)
    said = " ".join(notes)
    assert "“colour” is not a setting here" in said and "No tab “nope”" in said
    assert "Step 99 is outside 1–7: showing step 7." in said and page["step"] == 6
    assert "Temperature 9 is outside 0–2: using 2.0." in said and s.temperature == 2.0
    assert "Shape “circle” is not one of tree, chain" in said and s.shape == "Tree"
    assert "Seed “x” is not a number" in said and s.seed == 0
    assert "the first 4,000 are used" in said and len(s.prompt) == 4000
    assert "Cycle “-” is not a number" in said and "cycle" not in page


def test_every_setting_has_a_url_name_and_the_defaults_are_the_pages():
    assert sorted(FROM_URL.values()) == sorted(SETTING_NAMES)
    d = link_defaults(5)
    assert set(d) == set(FROM_URL) | set(OTHER) and d["cycle"] == 5
    assert d["temperature"] == Settings().temperature and d["shape"] == "tree" and d["tree"] == "static"
    html = marker_html(True, 5)
    assert "data-applied='1'" in html
    start = html.index("data-defaults='") + len("data-defaults='")
    from html import unescape
    assert json.loads(unescape(html[start:html.index("'", start)])) == d


def test_a_link_that_fails_opens_the_page_as_usual_and_says_so(monkeypatch):
    """An exception while applying a link (here: parse_link itself) costs the link, not the page: the marker says
    applied (the address follows again), nothing else is changed, and the note says what happened."""
    import types
    import tabs.links as links
    lens = types.SimpleNamespace(settings=["s1", "s2"], input_note="note", outs=["text", "state"], state="state")
    ln = object.__new__(links.Links)
    ln.tabs, ln.presenter, ln.lens, ln.walk = "tabs", "presenter", lens, types.SimpleNamespace(step="step")
    ln.marker, ln.cycle0, ln.views = "marker", 0, ["text"]

    def broken(*a):
        raise RuntimeError("boom")
    monkeypatch.setattr(links, "parse_link", broken)
    request = types.SimpleNamespace(query_params={"step": "4"})
    out = ln.on_open({}, request)
    assert "data-applied='1'" in out["marker"] and "could not be opened (RuntimeError: boom)" in out["note"]
    assert all(out[k] == {"__type__": "update"} for k in ("tabs", "presenter", "step", "s1", "s2", "text"))
