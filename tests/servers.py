"""Starting the app for tests: in this process (fast; the API tests) or as a subprocess (the browser, ZeroGPU and
embedded-target tests, which need their own environment or a fresh module state); and the arguments and
outputs of its API as the tests use them."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def app_in_process(target: str = "tiny", with_demo: bool = False):
    """The app on a free port in this process (module state: app.MODEL, app.SESSIONS); yields the URL, or (URL,
    its Blocks) with `with_demo`."""
    import app
    th = app.start_loading(target, "shifted")
    demo = app.build_demo()
    demo.queue(default_concurrency_limit=4)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, css=app.CSS, quiet=True)
    th.join(timeout=600)   # only bounds a hang: the embedded target loads in ~40 s here, ~160 s on a host 4x slower
    assert app.MODEL.status == "ready", app.MODEL.error
    try:
        url = f"http://127.0.0.1:{port}"
        yield (url, demo) if with_demo else url
    finally:
        demo.close()


@contextmanager
def app_subprocess(args: list[str], env: dict | None = None, log_path: str | None = None, ready=None,
                   timeout: float = 600, script: str = "app.py"):
    """`python app.py --port P ARGS` in a subprocess (`script`: another entry point, relative to the repository,
    that takes app.py's arguments); waits until it serves (and `ready(url)` is true, when given); yields (url,
    process). The output goes to `log_path` (a temporary file by default: a pipe nobody reads would fill up and
    stall a chatty server). `timeout` only bounds a hang (the app that never comes up): the embedded target's app
    comes up in ~60 s here, so 600 s holds on a host 4x slower."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="eagle-lens-app-", suffix=".log")
        os.close(fd)
    out = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, script), "--port", str(port)] + list(args),
                            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def tail() -> str:
        with open(log_path) as f:
            return f.read()[-3000:]
    try:
        t0 = time.time()
        while True:
            if proc.poll() is not None:
                raise AssertionError("the app exited:\n" + tail())
            if time.time() - t0 > timeout:
                raise AssertionError("the app did not come up:\n" + tail())
            try:
                urllib.request.urlopen(url, timeout=2)
                if ready is None or ready(url):
                    break
            except Exception:   # not serving yet, or `ready` could not ask it yet
                pass
            time.sleep(0.5)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()


def cfg(**kw) -> list:
    """The decoding controls after (prompt, shifted) in Step / Run / Race calls, in the app's order."""
    c = dict(temperature=0, top_p=1, seed=0, shape="Tree", tree_kind="static (EAGLE-1)", preset="cpu-12", depth=5,
             top_k=6, total=24, max_new=12)
    c.update(kw)
    return list(c.values())


def plot(out) -> dict:
    """A gr.Plot output as Plotly JSON."""
    return json.loads(out["plot"])
