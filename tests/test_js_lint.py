"""The page's JavaScript (views/js/*.js) parses and passes ESLint: each file on its own, and the function views/page.py
assembles from them for Gradio, where a name that no file defines is an error (the files' /* global */ comments are
ignored there).

ESLint lives outside the repository, in $EAGLE_LENS_ESLINT (default ~/.cache/eagle-lens/eslint), where .ci/run
installs it with npm. Missing, these tests skip, except in CI (CI=true or EAGLE_LENS_REQUIRE_ESLINT=1): there they
fail, so the lint cannot be skipped silently."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from views.page import JS_DIR, PAGE_JS, PAGE_SCRIPTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(JS_DIR, "eslint.config.mjs")
ESLINT_HOME = os.environ.get("EAGLE_LENS_ESLINT") or os.path.expanduser("~/.cache/eagle-lens/eslint")
ESLINT = os.path.join(ESLINT_HOME, "node_modules", "eslint", "bin", "eslint.js")
REQUIRED = os.environ.get("CI", "").lower() == "true" or os.environ.get("EAGLE_LENS_REQUIRE_ESLINT") == "1"
JS_FILES = sorted(glob.glob(os.path.join(ROOT, "views", "**", "*.js"), recursive=True))


def missing(what: str):
    """Skip, or fail where the lint is required."""
    (pytest.fail if REQUIRED else pytest.skip)(f"{what}; .ci/run installs it (npm install --prefix {ESLINT_HOME} eslint)")


def node() -> str:
    exe = shutil.which("node")
    if not exe:
        missing("node is not installed")
    return exe


def eslint(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    exe = node()
    if not os.path.exists(ESLINT):
        missing(f"ESLint is not installed in {ESLINT_HOME}")
    return subprocess.run([exe, ESLINT, "--max-warnings", "0", "-c", CONFIG, *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_every_script_is_part_of_the_page():
    names = {os.path.relpath(f, JS_DIR) for f in JS_FILES}
    assert names == set(PAGE_SCRIPTS) | {"presenter.js"}, names


@pytest.mark.parametrize("path", JS_FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_node_parses_each_file(path):
    r = subprocess.run([node(), "--check", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_node_parses_the_assembled_page_script(tmp_path):
    path = tmp_path / "page.js"
    path.write_text(PAGE_JS, encoding="utf-8")
    r = subprocess.run([node(), "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_eslint_each_file():
    r = eslint(*JS_FILES)
    assert r.returncode == 0, r.stdout + r.stderr


def test_eslint_the_assembled_page_script():
    """One scope, as the browser runs it: no undefined or unused name across the files (the one function is as long
    as all of them, so the length rules are off here; each file is held to them above)."""
    r = eslint("--no-inline-config", "--rule", "max-lines: off", "--rule", "max-lines-per-function: off",
               "--stdin", "--stdin-filename", os.path.join(JS_DIR, "assembled_page.js"), stdin=PAGE_JS)
    assert r.returncode == 0, r.stdout + r.stderr
