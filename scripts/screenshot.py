"""Screenshot of the running app for the README (assets/screenshot.png), taken with headless Chromium.

    python scripts/screenshot.py [--target embedded] [--out assets/screenshot.png] [--run] [--width W --height H]
        [--presenter] [--tab NAME] [--full-page]

Starts app.py on a free port, waits for the live model, optionally presses Run, and saves the top of the Lens
tab (prompt, generated text, statistics cards, draft tree). Needs the python `playwright` package and Chromium.
"""
from __future__ import annotations

import argparse
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
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright
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
            if args.run:
                page.locator("#el-run").click()
                page.wait_for_function("() => document.body.innerText.includes('Generation finished')",
                                       timeout=600000)
            if args.tab != "Lens":
                page.get_by_role("tab", name=args.tab).click()   # a wide page: every tab is visible
                if args.tab == "How can I":
                    page.locator("#el-amb").click()
                    page.wait_for_function("() => document.body.innerText.includes('Computed live')",
                                           timeout=120000)
            page.wait_for_timeout(1500)
            page.screenshot(path=args.out, full_page=args.full_page)
            browser.close()
        print(f"wrote {args.out}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    main()
