"""Screenshot of the running app for the README (assets/screenshot.png), taken with headless Chromium.

    python scripts/screenshot.py [--target embedded] [--out assets/screenshot.png] [--run] [--width W --height H]
        [--presenter] [--tab NAME] [--full-page] [--step N] [--race] [--hover-token] [--url URL]

Starts app.py on a free port, waits for the live model, optionally presses Run, and saves the top of the Lens
tab (prompt, generated text, statistics cards, draft tree). `--step N` shows walkthrough step N, `--race` runs the
Race to its end and shows the board, `--hover-token` hovers a drafted token of the shown cycle (the linked views:
its node lights up in the tree). Needs the python `playwright` package and Chromium.
"""
from __future__ import annotations

import argparse
import re
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="embedded")
    ap.add_argument("--out", default=os.path.join(ROOT, "assets", "screenshot.png"))
    ap.add_argument("--run", action="store_true", help="press Run and wait for the end before the screenshot")
    ap.add_argument("--tab", default="Lens")
    ap.add_argument("--height", type=int, default=1250)
    ap.add_argument("--width", type=int, default=1500, help="viewport width (390 for a phone, 1280 a projector)")
    ap.add_argument("--full-page", action="store_true", help="the whole scrolled page, not just the viewport")
    ap.add_argument("--presenter", action="store_true", help="turn Presenter mode on first (a projector)")
    ap.add_argument("--step", type=int, default=0, help="walkthrough step N (the Walkthrough tab)")
    ap.add_argument("--race", action="store_true", help="run the Race (Lens tab) to its end and show the board")
    ap.add_argument("--max-new", type=int, default=0, help="max new tokens for --run / --race (0: the default)")
    ap.add_argument("--hover-token", action="store_true", help="hover a drafted token of the shown cycle")
    ap.add_argument("--url", default="", help="a running app's address (python app.py --port P ...): no app started, "
                                                "so several screenshots share one model load")
    args = ap.parse_args(argv)
    if args.step:
        args.tab = "Walkthrough"
    from playwright.sync_api import sync_playwright
    proc = None
    if args.url:
        url = args.url
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "app.py"), "--port", str(port), "--target",
                                 args.target], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
        url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            chromium = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
            browser = p.chromium.launch(executable_path=chromium, args=ARGS)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(url)
            page.wait_for_selector("#el-tree .js-plotly-plot", timeout=120000)
            page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=300000)
            if args.presenter:
                page.locator("#el-presenter input").check()
                page.wait_for_function("() => document.body.classList.contains('el-presenter')", timeout=10000)
            if args.max_new:
                box = page.locator("input[type=number][aria-label*='Max new tokens']").first
                if not box.is_visible():          # the settings fold away: open their accordion
                    page.locator("button, .label-wrap", has_text=re.compile("^Settings")).first.click()
                box.fill(str(args.max_new))
                box.press("Enter")
                page.wait_for_timeout(500)
            if args.run:
                page.locator("#el-run").click()
                page.wait_for_function("() => document.body.innerText.includes('Generation finished')",
                                       timeout=600000)
            if args.race:
                page.locator("#el-race").scroll_into_view_if_needed()
                page.locator("#el-race").click()
                page.wait_for_function("() => /Both finished|Stopped/.test("
                                       "document.querySelector('#el-race-board').innerText)", timeout=600000)
                page.wait_for_timeout(1500)
                page.locator("#el-race-board").scroll_into_view_if_needed()
            if args.hover_token:
                shown = page.locator(".el-text").first.get_attribute("data-shown")
                page.locator(f".el-text .el-tok[data-cycle='{shown}'][data-kind='draft']").first.hover()
            if args.tab != "Lens":
                page.get_by_role("tab", name=args.tab).click()   # a wide page: every tab is visible
                if args.tab == "How can I":
                    page.locator("#el-amb").click()
                    page.wait_for_function("() => document.body.innerText.includes('Computed live')",
                                           timeout=120000)
                for _ in range(max(0, args.step - 1)):
                    page.locator("#el-walk-next").click()
                    page.wait_for_timeout(800)
                if args.step:
                    page.locator("#el-walk-fig").scroll_into_view_if_needed()
            page.wait_for_timeout(1500)
            page.screenshot(path=args.out, full_page=args.full_page)
            browser.close()
        print(f"wrote {args.out}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
