"""The four shared benchmark prompt sets (MT-bench, HumanEval, GSM8K, Alpaca as EAGLE publishes them), by name.

Read from ../shared/data beside the repository when it is there (this workplace); else from a per-user cache; else
fetched once from their public sources into that cache. Never into the repository: the shared folder asks that its
sets are not copied into the project's tree. Its files are the first 80 items of these sources, so a fetch keeps 80.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request

from ..paths import SHARED_DATA
from .errors import BenchError

ITEMS = 80
SOURCES = {   # name -> the public file (licences: docs/benchmarks.md)
    "mt_bench": "https://raw.githubusercontent.com/lm-sys/FastChat/main/fastchat/llm_judge/data/mt_bench/question.jsonl",
    "humaneval": "https://raw.githubusercontent.com/SafeAILab/EAGLE/main/eagle/data/humaneval/question.jsonl",
    "gsm8k": "https://raw.githubusercontent.com/SafeAILab/EAGLE/main/eagle/data/gsm8k/question.jsonl",
    "alpaca": "https://raw.githubusercontent.com/SafeAILab/EAGLE/main/eagle/data/alpaca/question.jsonl",
}
TITLES = {"mt_bench": "MT-bench", "humaneval": "HumanEval", "gsm8k": "GSM8K", "alpaca": "Alpaca"}   # as people write them
CACHE = os.environ.get("EAGLE_LENS_DATA_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "eagle-lens", "prompt-sets")


def file_name(name: str) -> str:
    return f"{name}_question.jsonl"


def set_of_path(path: str) -> str | None:
    """The set a path names by its file name (`.../mt_bench_question.jsonl` -> "mt_bench"), or None."""
    base = os.path.basename(path)
    return next((n for n in SOURCES if base == file_name(n)), None)


def set_path(name: str, shared: str | None = None, cache: str | None = None, fetch=None) -> str:
    """The local file of set `name`: shared folder, cache, or a fetch into the cache (said on stderr)."""
    shared, cache = shared or SHARED_DATA, cache or CACHE
    fetch = fetch or urllib.request.urlopen
    if name not in SOURCES:
        raise BenchError(f"unknown prompt set {name!r}: one of {', '.join(SOURCES)}")
    for folder in (shared, cache):
        path = os.path.join(folder, file_name(name))
        if os.path.isfile(path):
            return path
    url = SOURCES[name]
    try:
        with fetch(url, timeout=30) as resp:
            raw = resp.read()
    except (OSError, ValueError) as exc:   # URLError is an OSError; no network here
        raise BenchError(f"the {name} prompt set is neither in {shared} nor in {cache}, and fetching {url} failed "
                         f"({exc}); pass a file (--prompts PATH / --data FOLDER) or use the built-in "
                         "`--prompts humaneval`") from None
    lines = [ln for ln in raw.decode("utf-8").splitlines() if ln.strip()][:ITEMS]
    try:
        ok = all(isinstance(json.loads(ln).get("turns"), list) for ln in lines)
    except (json.JSONDecodeError, AttributeError):
        ok = False
    if not lines or not ok:
        raise BenchError(f"{url} did not give a question set (one JSON object with 'turns' a line)")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, file_name(name))
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".part", path)
    print(f"fetched the {name} prompt set ({len(lines)} items) from {url} into {path}", file=sys.stderr)
    return path


def resolve(path: str) -> str:
    """A prompt-file argument as given, unless it is missing and names a shared set: then that set's local file."""
    name = set_of_path(path)
    if os.path.exists(path) or name is None:
        return path
    return set_path(name)
