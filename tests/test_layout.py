"""The layout's rules, checked on the source: dependencies point one way and form no cycle, views/ needs neither
torch nor gradio, only tabs/ imports gradio, importing the benchmark changes nothing in the environment, and no
function, module or README grows past its size limit."""
import ast
import os
import subprocess
import sys
from collections import deque

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("eagle_core", "views", "tabs")          # with app.py: the code the layout rules cover


def module_name(path: str) -> str:
    """eagle_core/bench/run.py -> eagle_core.bench.run; a package's __init__.py -> the package."""
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def import_nodes(path: str):
    """(line, absolute module names) for every import statement in a file, at module level or inside a function
    alike; `from X import a` gives X and X.a (a may be a module), relative imports resolved against the package."""
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    pkg = rel.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            yield node.lineno, {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            yield node.lineno, {mod} | {f"{mod}.{a.name}" for a in node.names}


def imports_of(path: str) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package)."""
    return {m for _, ms in import_nodes(path) for m in ms}


def files(where: str) -> list[str]:
    """The .py files of a folder, or the one file `where` names."""
    full = os.path.join(ROOT, where)
    if os.path.isfile(full):
        return [full]
    return [os.path.join(d, f) for d, _, fs in os.walk(full) for f in fs if f.endswith(".py")]


UP_FROM_MODEL = ("eagle_core.decoding", "eagle_core.bench", "eagle_core.lab", "eagle_core.training",
                 "eagle_core.serving", "eagle_core.export", "eagle_core.generate", "gradio", "views", "tabs")


RULES = [   # (a folder or a module, what it must not import)
    ("eagle_core/paths.py", ("eagle_core.model", "eagle_core.quiet") + UP_FROM_MODEL + ("torch", "transformers")),
    ("eagle_core/quiet.py", ("eagle_core.model", "eagle_core.paths") + UP_FROM_MODEL + ("torch", "transformers")),
    ("eagle_core/model", UP_FROM_MODEL),
    ("eagle_core/decoding", UP_FROM_MODEL[1:]),
    ("eagle_core/generate.py", ("eagle_core.bench", "eagle_core.lab", "eagle_core.training", "eagle_core.serving",
                                "eagle_core.export", "gradio", "views", "tabs")),
    ("eagle_core/llamacpp.py", ("eagle_core.model", "eagle_core.quiet") + UP_FROM_MODEL + ("torch", "transformers")),
    ("eagle_core/export", ("eagle_core.bench", "eagle_core.lab", "eagle_core.training", "eagle_core.serving",
                              "eagle_core.generate", "gradio", "views", "tabs")),
    ("eagle_core/training", ("eagle_core.bench", "eagle_core.lab", "eagle_core.serving", "eagle_core.export",
                             "eagle_core.generate", "gradio", "views", "tabs")),
    ("eagle_core/bench", ("eagle_core.lab", "eagle_core.serving", "eagle_core.generate", "gradio", "views", "tabs")),
    ("eagle_core/lab", ("eagle_core.serving", "eagle_core.generate", "gradio", "views", "tabs")),
    ("eagle_core/serving", ("eagle_core.generate", "gradio", "views", "tabs")),
    ("views", ("torch", "gradio", "transformers", "tabs", "eagle_core.serving", "eagle_core.bench.run",
               "eagle_core.bench.cli", "eagle_core.export", "eagle_core.generate")),
]


@pytest.mark.parametrize("where,forbidden", RULES)
def test_dependencies_point_one_way(where, forbidden):
    bad = [(os.path.relpath(f, ROOT), m) for f in files(where) for m in imports_of(f)
           if any(m == x or m.startswith(x + ".") for x in forbidden)]
    assert not bad, bad


def test_every_part_of_the_package_has_a_dependency_rule():
    parts = {f"eagle_core/{n}" for n in os.listdir(os.path.join(ROOT, "eagle_core"))
             if n.endswith(".py") and n != "__init__.py"
             or os.path.isfile(os.path.join(ROOT, "eagle_core", n, "__init__.py"))}
    assert sorted(parts - {where for where, _ in RULES}) == []


def import_graph() -> dict[str, dict[str, int]]:
    """{module: {module it imports: line}} over app.py and every module of eagle_core/, views/ and tabs/. An import
    counts wherever it is written, at module level or inside a function (a function-level import only defers the
    cycle to the first call). Importing a.b.c also imports the packages a and a.b; a module's own enclosing
    packages are left out (they are initialised before it, so they never re-enter it)."""
    paths = [os.path.join(ROOT, "app.py")] + [f for p in PACKAGES for f in files(p)]
    names = {module_name(p): p for p in paths}
    graph = {}
    for name, path in names.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        edges = {}
        for line, mods in import_nodes(path):
            for m in mods:
                parts = m.split(".")
                for i in range(1, len(parts) + 1):
                    dep = ".".join(parts[:i])
                    if dep in names and dep != name and dep not in own:
                        edges[dep] = min(edges.get(dep, line), line)
        graph[name] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def shortest_cycle(graph, comp: set[str], start: str) -> list[str]:
    """[start, ..., start]: the shortest way back to start inside its component (breadth-first)."""
    prev, todo = {start: None}, deque([start])
    while todo:
        v = todo.popleft()
        if start in graph[v]:
            path = []
            while v is not None:
                path.append(v)
                v = prev[v]
            return path[::-1] + [start]
        for w in sorted(graph[v]):
            if w in comp and w not in prev:
                prev[w] = v
                todo.append(w)
    raise AssertionError(f"{start} is on no cycle of {sorted(comp)}")


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every module on a cycle with the shortest cycle through it, each cycle once (written from its first module
    in sorted order), so every module of a tangle is named."""
    out = set()
    for comp in strongly_connected(graph):
        for v in comp:
            c = shortest_cycle(graph, comp, v)[:-1]
            i = c.index(min(c))
            out.add(tuple(c[i:] + c[:i] + [c[i]]))
    return sorted(list(c) for c in out)


def describe(cycle: list[str], graph) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_no_import_cycles():
    graph = import_graph()
    found = [describe(c, graph) for c in cycles(graph)]
    if found:
        pytest.fail(f"import cycles: {len(found)} (each module with the line of its import of the next):\n"
                    + "\n".join(found), pytrace=False)


def test_the_cycle_finder_names_a_cycle():
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert describe(["a", "b", "c", "a"], graph) == "a (line 3) -> b (line 5) -> c (line 7) -> a"
    assert cycles({"a": {"b": 1}, "b": {}}) == []


MAX_FUNCTION_LINES, MAX_MODULE_LINES, MAX_README_LINES = 80, 500, 250


def structure_offenders() -> list[str]:
    """Every function (methods and nested functions included, from `def` to its last line) over 80 lines and every
    module over 500 lines in app.py, eagle_core/ and views/; the README over 250 lines or naming a path outside the
    repository (`../`)."""
    out = []
    for path in [os.path.join(ROOT, "app.py")] + files("eagle_core") + files("views"):
        rel = os.path.relpath(path, ROOT)
        text = open(path).read()
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            out.append(f"module {rel}: {n} lines (> {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"function {rel}:{node.lineno} {node.name}: {length} lines (> {MAX_FUNCTION_LINES})")
    readme = open(os.path.join(ROOT, "README.md")).read().splitlines()
    if len(readme) > MAX_README_LINES:
        out.append(f"README.md: {len(readme)} lines (> {MAX_README_LINES})")
    out += [f"README.md:{i}: a path outside the repository: {line.strip()}"
            for i, line in enumerate(readme, 1) if "../" in line]
    return out


def test_functions_modules_and_readme_stay_small():
    bad = structure_offenders()
    if bad:
        pytest.fail(f"over the limits: {len(bad)}\n" + "\n".join(bad), pytrace=False)


def test_only_the_tabs_import_gradio():
    users = {os.path.relpath(f, ROOT) for folder in PACKAGES for f in files(folder)
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
    code = ("import os; before = dict(os.environ); import eagle_core.bench.run, eagle_core.bench.cli, "
            "eagle_core.bench.sets, eagle_core.lab.measure; "
            "print(sorted(set(os.environ.items()) ^ set(before.items())))")
    assert run_python(code) == "[]"
