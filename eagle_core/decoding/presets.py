"""Static tree shapes: EAGLE-1's trees, small CPU trees, and the trees fitted per machine by
`python -m eagle_core.bench.tree_fit` (assets/trees/NAME.json, read on first use, not at import)."""
from __future__ import annotations

import glob
import json
import os
import threading
import warnings

from ..paths import TREES

# EAGLE-1's default tree for 7B targets (SafeAILab/EAGLE choices.py, mc_sim_7b_63): 25 drafted tokens + root,
# depth 5, widths 4/8/8/3/2.
MC_SIM_7B_63 = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
                [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
                [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]

TREE_PRESETS = {
    "mc_sim_7b_63": MC_SIM_7B_63,
    # small trees for a CPU, where every extra verified token costs real time (a 12-token verify pass costs
    # ~1.8 one-token passes on the 2-core dev machine)
    "cpu-4": [[0], [1], [2], [0, 0]],
    "cpu-6": [[0], [1], [2], [0, 0], [1, 0], [0, 0, 0]],
    "cpu-12": [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0],
               [0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
    "cpu-8": [[0], [1], [0, 0], [1, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
}


def load_fitted_trees(folder: str) -> dict:
    """Trees fitted to measured acceptance by `python -m eagle_core.bench.tree_fit` (assets/trees/NAME.json)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        try:
            with open(path) as f:
                choices = [[int(r) for r in c] for c in json.load(f)["choices"]]
            if not choices:
                raise ValueError("it has no drafted nodes")
            children_of_path(choices)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(f"skipping tree file {path}: {exc}")
            continue
        out[os.path.splitext(os.path.basename(path))[0]] = choices
    return out


def chain_choices(depth: int) -> list[list[int]]:
    return [[0] * d for d in range(1, depth + 1)]


def children_of_path(choices) -> dict:
    """{parent path: sorted child ranks}; checks that the choices form a tree with ranks 0..k-1 per node
    (sampled children are the first k draws without replacement, so a rank cannot be skipped)."""
    kids = {}
    paths = {tuple(c) for c in choices}
    for c in choices:
        c = tuple(int(r) for r in c)
        if not c or min(c) < 0:
            raise ValueError(f"bad tree choice {list(c)}")
        if len(c) > 1 and c[:-1] not in paths:
            raise ValueError(f"tree choice {list(c)} has no parent {list(c[:-1])} in the tree")
        kids.setdefault(c[:-1], []).append(c[-1])
    for parent, ranks in kids.items():
        if sorted(ranks) != list(range(len(ranks))):
            raise ValueError(f"children of {list(parent)} have ranks {sorted(ranks)}; need 0..{len(ranks) - 1}")
        kids[parent] = sorted(ranks)
    return kids


_FITTED_LOCK = threading.Lock()
_FITTED_LOADED = False


def tree_presets() -> dict:
    """Every static tree by name: the built-in ones, plus the fitted ones from assets/trees (loaded once)."""
    global _FITTED_LOADED
    with _FITTED_LOCK:
        if not _FITTED_LOADED:
            for name, choices in load_fitted_trees(TREES).items():
                TREE_PRESETS.setdefault(name, choices)
            _FITTED_LOADED = True
    return TREE_PRESETS


DYNAMIC_DIR = os.path.join(TREES, "dynamic")


def fitted_dynamic(name: str = "smollm2-cpu") -> dict:
    """EAGLE-2 settings {"depth", "top_k", "total_tokens"} that `python -m eagle_core.bench.dynamic_fit` measured
    fastest (assets/trees/dynamic/NAME.json); {} when absent or unreadable."""
    try:
        with open(os.path.join(DYNAMIC_DIR, f"{name}.json")) as f:
            d = json.load(f)
        return {k: int(d[k]) for k in ("depth", "top_k", "total_tokens")}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
