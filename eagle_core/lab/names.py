"""The Paper lab's prompts by their text: the shipped report (assets/lab.json) names its prompts by the prompt set's
ids (MT-bench's "81" ... "88") and the file it read them from; the text is looked up there, in the workplace's shared
folder (eagle_core.paths.SHARED_DATA), which asks that its files are not copied into the repository, or in the
per-user cache the benchmark fetches the sets into (bench/prompt_sets.py; never fetched from here: the page must not
wait for the network). Without either a prompt is named by its set and id ("MT-bench question 81"), never by a bare
id."""
from __future__ import annotations

import os

from ..paths import REPO, SHARED_DATA


def prompt_file(report: dict, shared: str = SHARED_DATA, cache: str | None = None) -> str | None:
    """The prompt file a report was measured on: its recorded path (relative to the repository, where the CLI runs),
    else the file of that name in the shared data folder or the prompt-set cache; None when none exists (or it was a
    built-in set)."""
    from ..bench.prompt_sets import CACHE
    path = str((report or {}).get("prompts") or "")
    if not path:
        return None
    name = os.path.basename(path)
    for p in (path if os.path.isabs(path) else os.path.join(REPO, path), os.path.join(shared, name),
              os.path.join(cache or CACHE, name)):
        if os.path.isfile(p):
            return p
    return None


def prompt_texts(report: dict, shared: str = SHARED_DATA, cache: str | None = None) -> dict[str, str]:
    """{prompt id: prompt text} for the prompts of a report's per-prompt panels ({} when the file is not here)."""
    from ..bench.errors import BenchError
    from ..bench.prompts import read_prompt_file
    ids = set(((report or {}).get("positions") or {}).get("by_prompt") or {})
    path = prompt_file(report, shared, cache)
    if not ids or path is None:
        return {}
    try:
        return {p["id"]: p["prompt"] for p in read_prompt_file(path) if p["id"] in ids}
    except (BenchError, OSError):
        return {}


def set_title(report: dict) -> str:
    """The prompt set a report was measured on, as people name it ("MT-bench"), else its file's name."""
    from ..bench.prompt_sets import TITLES, set_of_path
    path = str((report or {}).get("prompts") or "")
    name = set_of_path(path)
    return TITLES.get(name, name) if name else os.path.splitext(os.path.basename(path))[0] or "prompt"


def prompt_names(report: dict, shared: str = SHARED_DATA, cache: str | None = None) -> dict[str, str]:
    """{prompt id: a name for people} for every prompt of a report's per-prompt panels: its text where the prompt
    file is here (prompt_texts), else its set and id, "MT-bench question 81"."""
    ids = list(((report or {}).get("positions") or {}).get("by_prompt") or {})
    texts = prompt_texts(report, shared, cache)
    title = set_title(report)
    return {i: texts.get(i) or f"{title} question {i}" for i in ids}
