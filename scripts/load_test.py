"""Load test: N students use one EAGLE Lens server at once, through its API (gradio_client).

    python scripts/load_test.py --students 30 --url http://127.0.0.1:7860 [--json runs/load.json]

Each student is a thread with its own Client (its own session, like its own browser tab); all start together:

    open         create the Client (the page's config and API info: what a page open fetches)
    step x5      five Steps of one generation (T = 0, max new tokens M)
    run          Run it to M tokens (submit -> final output; "run: first output" = submit -> first streamed one)
    tokens       /session_tokens: the student's token ids must equal the reference for its prompt (cross-talk)
    stop         a Run of a new generation (another prompt, more tokens), stopped once it has streamed: the time
                 from the /stop call to the end of that Run; its last status must say "Stopped"
    how can I    /ambiguity "How can I" with 3 branches

Errors: any exception, any status starting with "❌", any missing expected text. Cross-talk: a student's tokens differ
from the reference (T = 0 greedy, which EAGLE reproduces token for token) for its prompt. The reference comes from
the CLI (`python -m eagle_core.generate --json`, embedded target) before the load starts, or from the engine in this
process (`--reference engine`, plain decoding; `--target tiny` for the app's tiny test target). A separate client
polls /server_stats every 2 s (resident memory, sessions, decoders, the model queue). Exit code 1 when there are
errors or cross-talk.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")   # no telemetry thread per client
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from eagle_core.bench.host_pass import host_pass_ms  # noqa: E402  (the unit the targets are stated in)

PROMPTS = [
    "Explain how a bicycle works.",
    "Write a short poem about the sea.",
    "What are three tips for learning Python?",
    "Describe the water cycle in simple words.",
    "Give me a simple recipe for pancakes.",
    "Why is the sky blue?",
]
# a prompt near the page's 4,000-character limit (~730 tokens): --long-prompt-students N give it to N students
LONG_PROMPT = ("Summarise the following notes for a student, then list three questions they raise. " + " ".join(
    f"Note {i}: the lighthouse keeper logged the storm at hour {i}, the wind from the north-west, the waves "
    f"breaking over the rocks, the lamp turning twice a minute, and the supply boat {i % 3 + 1} days late."
    for i in range(1, 24)))[:3990]
SMALLER_TREE = "class's load gave"     # views/tree.py and views/stats.py say it when a round shrank a tree
WAITING = "Waiting for the shared model"
QUEUE_RE = re.compile(r"Waiting for the shared model: (\d+) requests? ahead of you, (\d+) s")
ACTIONS = ["open", "step", "step 1 (with the prefill)", "steps 2-5", "run", "run: first output", "run: first text",
           "tokens", "stop", "how can I"]
STEPS = 5


# ----------------------------------------------------------------------------- the clients' own cost
def share_tls_contexts() -> None:
    """One TLS context per setting, shared by every HTTP client this process makes.

    A class's browsers run on the students' machines; these clients share the server's, so what they cost is taken
    from the server. gradio_client opens a new httpx client for most requests, and httpx builds a TLS context for
    each one (reading certifi's CA bundle, ~10-20 ms of CPU) even for an http:// URL: a profile of this test's
    clients (py-spy, 30 students) put 12% of their samples there. A shared context changes no request."""
    import functools

    import httpx._transports.default as transport
    make = transport.create_ssl_context
    if getattr(make, "shared", False):
        return

    @functools.lru_cache(maxsize=8)
    def cached(verify, cert, trust_env):
        return make(verify=verify, cert=cert, trust_env=trust_env)

    def shared(verify=True, cert=None, trust_env=True):
        try:
            return cached(verify, cert, trust_env)
        except TypeError:                      # an unhashable setting (a context object, a cert tuple of lists)
            return make(verify=verify, cert=cert, trust_env=trust_env)

    shared.shared = True
    transport.create_ssl_context = shared


# ----------------------------------------------------------------------------- references (T = 0)
def cli_reference(prompt: str, max_new: int, target: str, timeout: float) -> dict:
    """The CLI's greedy generation of one prompt (it loads the target itself)."""
    cmd = [sys.executable, "-m", "eagle_core.generate", "--prompt", prompt, "--max-new-tokens", str(max_new),
           "--json"]
    if target not in ("", "embedded"):
        cmd += ["--target", target]
    env = dict(os.environ)
    if (os.cpu_count() or 1) <= 2 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = "1"    # the app's own setting on a 2-core box (same arithmetic as the server)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"CLI failed for {prompt!r} (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        raise RuntimeError(f"CLI printed no JSON for {prompt!r}: {p.stdout[-300:]}")
    d = json.loads(line)
    return {"token_ids": d["token_ids"], "finished": d.get("finished"), "text": d.get("text", "")}


def engine_references(prompts: list[str], max_new: int, target_spec: str) -> dict:
    """Plain greedy decoding (draft="vanilla") in this process, on the embedded target or the app's tiny one."""
    import torch

    from eagle_core.decoding.engine import DecodeConfig, generate
    if (os.cpu_count() or 1) <= 2:
        torch.set_num_threads(1)
    if target_spec in ("tiny", "tiny-random"):
        import app
        target = app.tiny_target()
    else:
        from eagle_core.model.target import load_target
        target = load_target(None if target_spec in ("", "embedded") else target_spec)
    out = {}
    for p in prompts:
        r = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=max_new), target.render_prompt(p), p)
        out[p] = {"token_ids": list(r.token_ids), "finished": r.finished, "text": r.text}
    return out


def references(kind: str, prompts: list[str], max_new: int, target: str, timeout: float) -> dict:
    distinct = list(dict.fromkeys(prompts))
    if kind == "none":
        return {}
    if kind == "engine":
        return engine_references(distinct, max_new, target)
    if target in ("tiny", "tiny-random"):
        raise SystemExit("the CLI loads real targets only: use --reference engine with --target tiny")
    workers = max(1, min(2, (os.cpu_count() or 1) // 2 or 1, len(distinct)))
    with ThreadPoolExecutor(workers) as ex:
        futs = {p: ex.submit(cli_reference, p, max_new, target, timeout) for p in distinct}
        return {p: f.result() for p, f in futs.items()}


def compare(got: list, got_finished, ref: dict) -> int | None:
    """Index of the first token where a student's generation differs from the reference (None: the same).
    Equal lengths are required unless one of the two stopped at eos."""
    want = ref["token_ids"]
    n = min(len(got), len(want))
    first = next((k for k in range(n) if got[k] != want[k]), None)
    if first is None and len(got) != len(want) and "eos" not in (got_finished, ref.get("finished")):
        first = n
    return first


def in_passes(actions: dict, host_ms: float | None) -> dict:
    """The issue's targets in host passes: Step p50, steps 2-5 p95, 64-token Run p50."""
    if not host_ms:
        return {}
    pick = {"step p50": ("step", "p50"), "steps 2-5 p95": ("steps 2-5", "p95"), "run p50": ("run", "p50")}
    return {k: round(1000 * actions[a][q] / host_ms, 1) for k, (a, q) in pick.items()
            if actions.get(a, {}).get(q) == actions.get(a, {}).get(q) and actions.get(a, {}).get(q) is not None}


# ----------------------------------------------------------------------------- one student
def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Student:
    def __init__(self, i: int, args, prompt: str, prompt2: str):
        self.i, self.args, self.prompt, self.prompt2 = i, args, prompt, prompt2
        self.times: dict[str, list[float]] = {a: [] for a in ACTIONS}
        self.errors: list[dict] = []
        self.saw_queue = False
        self.max_ahead = 0
        self.max_waited_s = 0
        self.tokens: dict | None = None
        self.mismatch: int | None = None
        self.done = False
        self.steps_with_smaller_tree = 0

    def error(self, action: str, msg: str):
        self.errors.append({"student": self.i, "action": action, "message": str(msg)[:400]})

    def note_statuses(self, statuses):
        for s in statuses:
            s = str(s or "")
            if WAITING in s:
                self.saw_queue = True
                m = QUEUE_RE.search(s)
                if m:
                    self.max_ahead = max(self.max_ahead, int(m.group(1)))
                    self.max_waited_s = max(self.max_waited_s, int(m.group(2)))

    def check_statuses(self, action: str, statuses) -> bool:
        bad = [str(s) for s in statuses if str(s or "").lstrip().startswith("❌")]
        if bad:
            self.error(action, bad[-1])
        return not bad

    def settings(self, prompt: str, max_new: int) -> dict:
        # the page's defaults for the tree settings; greedy and seed 0 so the text is the reference's
        return dict(prompt=prompt, shifted=True, temperature=0, top_p=1, seed=0, max_new=max_new)

    def wait_for(self, job, pred, limit: float) -> float | None:
        """Poll a streaming job until one of its outputs satisfies pred; the time it appeared (None: never)."""
        t_end = time.perf_counter() + limit
        seen = 0
        while time.perf_counter() < t_end:
            outs = job.outputs()
            for o in outs[seen:]:
                if pred(o):
                    return time.perf_counter()
            seen = len(outs)
            if job.done():
                return None
            time.sleep(0.02)
        return None

    def run(self, barrier: threading.Barrier, ref: dict | None):
        from gradio_client import Client
        a, to = self.args, self.args.timeout
        client = None
        try:
            barrier.wait(timeout=to)
            t0 = time.perf_counter()
            client = Client(a.url, verbose=False)
            self.times["open"].append(time.perf_counter() - t0)

            kw = self.settings(self.prompt, a.max_new_tokens)
            finished_early, cycle = False, 0     # the cycle the next Step should show (after failed Steps too)
            for k in range(STEPS):
                t0 = time.perf_counter()
                job = client.submit(**kw, api_name="/step")
                final = job.result(timeout=to)
                dt = time.perf_counter() - t0
                self.times["step"].append(dt)
                self.times["step 1 (with the prefill)" if k == 0 else "steps 2-5"].append(dt)
                statuses = [o[8] for o in job.outputs()]
                self.note_statuses(statuses)
                if not self.check_statuses(f"step {k + 1}", statuses):
                    continue
                if SMALLER_TREE in json.dumps(final, default=str):
                    self.steps_with_smaller_tree += 1
                status = str(final[8])
                if "finished" in status:         # the answer ended (eos) within the Steps: allowed, kept
                    finished_early = True
                    continue
                shown = final[2].get("value") if isinstance(final[2], dict) else None
                if shown != cycle:
                    self.error(f"step {k + 1}", f"expected cycle {cycle} on the slider, got {final[2]!r:.200}")
                cycle = (shown if isinstance(shown, int) else cycle) + 1
                if "el-tok" not in str(final[0]):
                    self.error(f"step {k + 1}", "the text panel shows no tokens")

            t0 = time.perf_counter()
            job = client.submit(**kw, api_name="/run")
            first = self.wait_for(job, lambda o: True, to)                        # a queue note counts
            text = self.wait_for(job, lambda o: WAITING not in str(o[8]), to) if first is not None else None
            final = job.result(timeout=to)
            t1 = time.perf_counter()
            if first is not None:
                self.times["run: first output"].append(first - t0)
            if text is not None:
                self.times["run: first text"].append(text - t0)
            self.times["run"].append(t1 - t0)
            statuses = [o[8] for o in job.outputs()]
            self.note_statuses(statuses)
            if self.check_statuses("run", statuses):
                status = str(final[8])
                if "finished" not in status:
                    self.error("run", f"the Run ended without 'finished' in its status: {status[:200]!r}")
                elif status.startswith("ℹ️") and not finished_early:
                    self.error("run", f"unexpected notice: {status[:200]!r}")

            t0 = time.perf_counter()
            self.tokens = client.predict(api_name="/session_tokens")
            self.times["tokens"].append(time.perf_counter() - t0)
            ids = self.tokens.get("token_ids") or []
            if not ids:
                self.error("tokens", "the session has no generated tokens")
            elif len(ids) != a.max_new_tokens and self.tokens.get("finished") != "eos":
                self.error("tokens", f"{len(ids)} tokens, expected {a.max_new_tokens} "
                                     f"(finished: {self.tokens.get('finished')})")
            if ref is not None and ids:
                self.mismatch = compare(ids, self.tokens.get("finished"), ref)

            # a new generation (another prompt, longer), stopped once it has streamed
            kw2 = self.settings(self.prompt2, a.stop_run_tokens)
            job = client.submit(**kw2, api_name="/run")
            streamed = self.wait_for(job, lambda o: WAITING not in str(o[8]), to)
            if streamed is None:
                job.result(timeout=to)
                outs = job.outputs()
                self.note_statuses([o[8] for o in outs])
                last = str(outs[-1][8])[:200] if outs else "no output"
                self.error("stop", f"the second Run ended before streaming anything: {last!r}")
            else:
                t0 = time.perf_counter()
                said = client.predict(api_name="/stop")
                final = job.result(timeout=to)
                self.times["stop"].append(time.perf_counter() - t0)
                statuses = [o[8] for o in job.outputs()]
                self.note_statuses(statuses)
                if self.check_statuses("stop", statuses):
                    if "Stopping" not in str(said):
                        self.error("stop", f"/stop answered {said!r}")
                    if "Stopped" not in str(final[8]):
                        self.error("stop", f"the stopped Run's status has no 'Stopped': {str(final[8])[:200]!r}")

            t0 = time.perf_counter()
            job = client.submit("How can I", 3, api_name="/ambiguity")
            final = job.result(timeout=to)
            self.times["how can I"].append(time.perf_counter() - t0)
            statuses = [o[3] for o in job.outputs()]
            self.note_statuses(statuses)
            if self.check_statuses("how can I", statuses):
                if not str(final[3]).startswith("Computed"):
                    self.error("how can I", f"status {str(final[3])[:200]!r}")
                elif "shifted head" not in json.dumps(final[0]):
                    self.error("how can I", "the feature figure has no shifted-head trace")
            self.done = True
        except Exception as exc:
            self.error("exception", f"{type(exc).__name__}: {exc} | "
                                    f"{traceback.format_exc().strip().splitlines()[-1][:200]}")
        finally:
            if client is not None:
                try:
                    client.close()   # like closing the tab: the server frees this session's decoder
                except Exception:
                    pass


# ----------------------------------------------------------------------------- the server's side
class StatsPoller(threading.Thread):
    def __init__(self, url: str, every: float = 2.0):
        super().__init__(daemon=True, name="server-stats")
        from gradio_client import Client
        self.client = Client(url, verbose=False)
        self.every, self.samples, self.failures = every, [], 0
        self.halt = threading.Event()

    def sample(self) -> dict | None:
        try:
            s = self.client.predict(api_name="/server_stats")
            s["t"] = time.time()
            return s
        except Exception:
            self.failures += 1
            return None

    def run(self):
        while not self.halt.is_set():
            s = self.sample()
            if s is not None:
                self.samples.append(s)
            self.halt.wait(self.every)


# ----------------------------------------------------------------------------- the report
def table(actions: dict) -> str:
    rows = ["| action | n | p50 s | p95 s | max s |", "|---|---:|---:|---:|---:|"]
    for a in ACTIONS:
        st = actions[a]
        if st["n"]:
            rows.append(f"| {a} | {st['n']} | {st['p50']:.2f} | {st['p95']:.2f} | {st['max']:.2f} |")
        else:
            rows.append(f"| {a} | 0 | - | - | - |")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="N concurrent students through EAGLE Lens's API.")
    ap.add_argument("--students", type=int, default=10)
    ap.add_argument("--url", default="http://127.0.0.1:7860")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the Steps + Run generation's length")
    ap.add_argument("--stop-run-tokens", type=int, default=512,
                    help="the second (stopped) Run's max new tokens: long enough to be stopped midway")
    ap.add_argument("--prompts", nargs="+", default=None, help="student i uses prompt i %% len (default: 6 built in)")
    ap.add_argument("--reference", choices=["cli", "engine", "none"], default="cli")
    ap.add_argument("--target", default="embedded", help="the references' target: embedded | tiny (engine) | PATH")
    ap.add_argument("--long-prompt-students", type=int, default=0,
                    help="this many students (the first) use a prompt of ~3,990 characters (~730 tokens)")
    ap.add_argument("--host-pass", action="store_true",
                    help="measure this host's pass first (stock transformers, fp32, the embedded target: one token "
                         "over a 256-token cache) and give the times in those passes too")
    ap.add_argument("--json", default=None, help="write the report here")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for any one action")
    ap.add_argument("--stats-every", type=float, default=2.0)
    ap.add_argument("--settle", type=float, default=30.0,
                    help="after the load, wait up to this long for the closed sessions' decoders to be freed")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.students < 1:
        raise SystemExit("--students must be >= 1")
    prompts = args.prompts or PROMPTS
    url = args.url.rstrip("/")
    args.url = url

    t_ref = time.perf_counter()
    print(f"references: {args.reference} ({args.target}), {len(set(prompts))} prompts, "
          f"{args.max_new_tokens} tokens ...", flush=True)
    refs = references(args.reference, prompts, args.max_new_tokens, args.target, args.timeout)
    t_ref = time.perf_counter() - t_ref
    print(f"references ready in {t_ref:.0f} s", flush=True)

    share_tls_contexts()
    poller = StatsPoller(url, args.stats_every)
    before = poller.sample()
    poller.start()

    host_ms = host_pass_ms() if args.host_pass else None
    if host_ms:
        print(f"this host's pass (stock transformers, fp32, one token over a 256-token cache): {host_ms:.1f} ms",
              flush=True)
    if args.long_prompt_students:
        refs.update(references(args.reference, [LONG_PROMPT], args.max_new_tokens, args.target, args.timeout))
    students = [Student(i, args, LONG_PROMPT if i < args.long_prompt_students else prompts[i % len(prompts)],
                        prompts[(i + 1) % len(prompts)]) for i in range(args.students)]
    barrier = threading.Barrier(args.students)
    threads = [threading.Thread(target=s.run, args=(barrier, refs.get(s.prompt)), name=f"student-{s.i}",
                                daemon=True) for s in students]
    t0, cpu0 = time.perf_counter(), os.times()
    for th in threads:
        th.start()
    deadline = time.perf_counter() + args.timeout * (STEPS + 6)
    for th in threads:
        th.join(timeout=max(0.0, deadline - time.perf_counter()))
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    client_cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    for s, th in zip(students, threads):
        if th.is_alive():
            s.error("timeout", "the student had not finished when the load test gave up")
    # "after": once the closed tabs' decoders are freed (the server notices a closed client's heartbeat), or
    # after --settle seconds
    t_settle = time.perf_counter()
    after = poller.sample()
    base = (before or {}).get("decoders", 0)
    while time.perf_counter() - t_settle < args.settle and (after is None or after["decoders"] > base):
        time.sleep(1.0)
        after = poller.sample() or after
    t_settle = time.perf_counter() - t_settle
    poller.halt.set()
    poller.join(timeout=args.timeout)

    actions = {}
    for a in ACTIONS:
        xs = [x for s in students for x in s.times[a]]
        actions[a] = dict(n=len(xs), p50=percentile(xs, 0.5), p95=percentile(xs, 0.95), max=max(xs) if xs else None)
    errors = [e for s in students for e in s.errors]
    cross = []
    for s in students:
        if s.mismatch is not None:
            ref = refs[s.prompt]
            got = (s.tokens or {}).get("token_ids") or []
            cross.append(dict(student=s.i, prompt=s.prompt, first_difference=s.mismatch, student_tokens=len(got),
                              reference_tokens=len(ref["token_ids"]), student_finished=(s.tokens or {}).get("finished"),
                              reference_finished=ref.get("finished"),
                              student_text=(s.tokens or {}).get("text", "")[:300], reference_text=ref["text"][:300]))
    # the students on one prompt must agree with each other too (a check that needs no reference)
    by_prompt: dict[str, set] = {}
    for s in students:
        if s.tokens and s.tokens.get("token_ids"):
            by_prompt.setdefault(s.prompt, set()).add(tuple(s.tokens["token_ids"]))
    disagree = sorted(p for p, v in by_prompt.items() if len(v) > 1)
    samples = [x for x in [before] + poller.samples + [after] if x]
    mem = dict(before_mb=(before or {}).get("rss_mb"), max_mb=max((x["rss_mb"] for x in samples), default=None),
               after_mb=(after or {}).get("rss_mb"))
    server = dict(max_sessions=max((x["sessions"] for x in samples), default=None),
                  max_decoders=max((x["decoders"] for x in samples), default=None),
                  max_running=max((x["running"] for x in samples), default=None),
                  max_waiting=max((x["waiting"] for x in samples), default=None),
                  sessions_after=(after or {}).get("sessions"), decoders_after=(after or {}).get("decoders"),
                  after_measured_s_after_load=round(t_settle, 1),
                  model_turns=((after or {}).get("model_turns", 0) - (before or {}).get("model_turns", 0)
                               if before and after else None),
                  stats_samples=len(poller.samples), stats_failures=poller.failures)
    # the CPU each side used during the load (the students' clients share the server's machine when run on it)
    cpus = [x["cpu_s"] for x in samples if x.get("cpu_s") is not None]
    server_cpu = round(max(cpus) - min(cpus), 1) if len(cpus) > 1 else None
    cpu = dict(client_cpu_s=round(client_cpu, 1), server_cpu_s=server_cpu, cores=os.cpu_count(),
               wall_s=round(wall, 1))
    queue = dict(students_saw_queue=sum(s.saw_queue for s in students),
                 max_ahead_shown=max((s.max_ahead for s in students), default=0),
                 max_wait_shown_s=max((s.max_waited_s for s in students), default=0))
    report = dict(url=url, students=args.students, max_new_tokens=args.max_new_tokens,
                  stop_run_tokens=args.stop_run_tokens, prompts=prompts, reference=args.reference,
                  target=args.target, reference_seconds=round(t_ref, 1), wall_seconds=round(wall, 1),
                  students_completed=sum(s.done for s in students), actions=actions, errors=errors,
                  n_errors=len(errors), cross_talk=cross, n_cross_talk=len(cross),
                  prompts_where_students_disagree=disagree, queue=queue, memory=mem, server=server, cpu=cpu,
                  stats=poller.samples, long_prompt_students=args.long_prompt_students,
                  steps_with_smaller_tree=sum(s.steps_with_smaller_tree for s in students),
                  host_pass_ms=host_ms, in_host_passes=in_passes(actions, host_ms))

    print()
    print(f"{args.students} students, {args.max_new_tokens} tokens, {url}: {wall:.0f} s wall, "
          f"{report['students_completed']}/{args.students} completed every action")
    print(table(actions))
    print()
    if host_ms:
        print(f"in this host's passes ({host_ms:.1f} ms): " + ", ".join(
            f"{k} {v:.0f}" for k, v in report["in_host_passes"].items()))
    print(f"steps given a smaller tree than their student set: {report['steps_with_smaller_tree']}"
          + (f"; {args.long_prompt_students} students on a {len(LONG_PROMPT):,}-character prompt"
             if args.long_prompt_students else ""))
    print(f"errors: {len(errors)}")
    for e in errors[:20]:
        print(f"  student {e['student']} {e['action']}: {e['message']}")
    ref_note = "" if refs else " (no reference)"
    print(f"cross-talk: {len(cross)}{ref_note}" + (f"; students disagree on {len(disagree)} prompt(s)" if disagree
                                                     else "; students on the same prompt agree"))
    for c in cross[:20]:
        print(f"  student {c['student']} {c['prompt']!r}: first difference at token {c['first_difference']} "
              f"({c['student_tokens']} vs {c['reference_tokens']} reference tokens)")
    print(f"students that saw their queue position: {queue['students_saw_queue']}/{args.students} "
          f"(at most {queue['max_ahead_shown']} requests ahead, {queue['max_wait_shown_s']} s waited, as shown)")
    print(f"server memory (RSS): before {mem['before_mb']} MB, max {mem['max_mb']} MB, after {mem['after_mb']} MB; "
          f"max sessions {server['max_sessions']}, decoders {server['max_decoders']}, running "
          f"{server['max_running']}, waiting {server['max_waiting']}; after ({t_settle:.0f} s after the load): "
          f"{server['sessions_after']} sessions, {server['decoders_after']} decoders; "
          f"{server['model_turns']} model turns")
    if server_cpu is not None:
        print(f"CPU during the load: server {server_cpu} s, these {args.students} clients {cpu['client_cpu_s']} s, "
              f"of {wall:.0f} s wall x {os.cpu_count()} cores (the clients' share is taken from the server when "
              f"they run on its machine)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 1 if errors or cross else 0


if __name__ == "__main__":
    sys.exit(main())
