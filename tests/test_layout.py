"""The layout's rules, checked on the source: dependencies point one way, views/ needs neither torch nor gradio,
only tabs/ imports gradio, and importing the benchmark changes nothing in the environment."""
import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def imports_of(path: str) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package)."""
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    pkg = rel.rsplit(".", 1)[0] if not rel.endswith("__init__") else rel.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
            else:
                out.add(node.module)
    return out


def files(folder: str) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, folder)) for f in fs if f.endswith(".py")]


@pytest.mark.parametrize("folder,forbidden", [
    ("eagle_core/model", ("eagle_core.decoding", "eagle_core.bench", "eagle_core.lab", "eagle_core.training",
                          "eagle_core.serving", "gradio", "views", "tabs")),
    ("eagle_core/decoding", ("eagle_core.bench", "eagle_core.lab", "eagle_core.training", "eagle_core.serving",
                             "gradio", "views", "tabs")),
    ("eagle_core/training", ("eagle_core.bench", "eagle_core.lab", "eagle_core.serving", "gradio", "views", "tabs")),
    ("eagle_core/bench", ("eagle_core.lab", "eagle_core.serving", "gradio", "views", "tabs")),
    ("eagle_core/lab", ("eagle_core.serving", "gradio", "views", "tabs")),
    ("eagle_core/serving", ("gradio", "views", "tabs")),
    ("views", ("torch", "gradio", "transformers", "tabs", "eagle_core.serving", "eagle_core.bench.run")),
])
def test_dependencies_point_one_way(folder, forbidden):
    bad = [(os.path.relpath(f, ROOT), m) for f in files(folder) for m in imports_of(f)
           if any(m == x or m.startswith(x + ".") for x in forbidden)]
    assert not bad, bad


def test_only_the_tabs_import_gradio():
    users = {os.path.relpath(f, ROOT) for folder in ("eagle_core", "views", "tabs") for f in files(folder)
             if any(m == "gradio" or m.startswith("gradio.") for m in imports_of(f))}
    assert users and all(u.startswith("tabs" + os.sep) for u in users), users
    assert not any(m.startswith("gradio") for m in imports_of(os.path.join(ROOT, "app.py")))


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": ROOT}).stdout.strip()


def test_views_and_the_package_import_without_torch():
    assert run_python("import sys, views, eagle_core, views.lab, views.walkthrough; "
                      "print(sorted(m for m in ('torch', 'gradio') if m in sys.modules))") == "[]"


def test_importing_the_benchmark_leaves_the_environment_alone():
    code = ("import os; before = dict(os.environ); import eagle_core.bench.run, eagle_core.bench.sets, "
            "eagle_core.lab.measure; print(sorted(set(os.environ.items()) ^ set(before.items())))")
    assert run_python(code) == "[]"
