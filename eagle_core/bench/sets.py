"""The benchmark on every shared prompt set, with one command, one process and one set of defaults.

    python -m eagle_core.bench.sets --limit 20 [--sets mt_bench,humaneval,gsm8k,alpaca] [--data ../shared/data] \
        [--methods hf-greedy,vanilla,eagle-static,eagle-dynamic,hf-prompt-lookup] [--out assets/bench]

For each set it runs eagle_core.bench.run.run_bench (same target, heads, tree and kernels for all: nothing is tuned per
set) and writes OUT/sets_<set>_t0_cpu.json; then a combined table (one row per set: tau, tokens/s, speedup with its
95% interval, prompt lookup) to stdout and OUT/sets_t0_cpu.md, and one chart of every set, OUT/sets_t0_cpu.png.
The machine is checked before the run and during every timed run, as the benchmark does.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys
import textwrap

from . import machine_load
from .errors import BenchError
from .methods import BASELINE, EAGLE_DRAFTS, method_head_shift, parse_methods
from .prompt_sets import set_path
from .prompts import load_prompts
from .pass_cost import format_pass_costs
from .report import cycle_cost, format_table
from .summary import fastest
from ..quiet import quiet_libraries
from .preflight import check_quiet, fail
from .run import device_string, run_bench

SETS = ("mt_bench", "humaneval", "gsm8k", "alpaca")
DEFAULT_METHODS = "hf-greedy,vanilla,eagle-static,eagle-dynamic,hf-prompt-lookup"
from ..paths import SHARED_DATA as DATA   # ../shared/data beside the repository, wherever the command runs


def set_row(name: str, report: dict, eagle: str) -> dict:
    """One row of the combined table from a set's report: the EAGLE method's figures and prompt lookup's."""
    ms = report["methods"]
    e, pl = ms.get(eagle, {}), ms.get("hf-prompt-lookup", {})
    return {"set": name, "n": e.get("n_prompts"), "method": eagle, "tau": e.get("tau"),
            "tokens_per_s": e.get("tokens_per_s"), "baseline_tokens_per_s": ms.get(BASELINE, {}).get("tokens_per_s"),
            "speedup": e.get("speedup"), "speedup_ci95": e.get("speedup_ci95"),
            "prompt_lookup_speedup": pl.get("speedup"), "prompt_lookup_tau": pl.get("tau"),
            "mismatches": e.get("mismatches"), "quiet": report.get("load", {}).get("quiet"),
            "vanilla_speedup": ms.get("vanilla", {}).get("speedup"),
            "fp32_parted": (report.get("numerics") or {}).get("parted"),
            "cycle_cost": cycle_cost(e, ms.get(BASELINE)) if e else None,
            "fastest": report.get("fastest") or fastest(ms)}


def best_eagle(report: dict) -> str | None:
    """The EAGLE method with the highest mean speedup in a report."""
    cands = [(s["speedup"], m) for m, s in report["methods"].items()
             if m.partition(":")[0] in EAGLE_DRAFTS and s.get("speedup") is not None]
    return max(cands)[1] if cands else None


def format_rows(rows: list[dict]) -> str:
    f = lambda x, fmt="{:.2f}": "-" if x is None else fmt.format(x)   # noqa: E731
    head = ("| prompt set | n | EAGLE method | tau | cycle cost | tok/s (hf-greedy) | speedup | 95% CI | "
            "vanilla | prompt lookup | mismatches | parts from fp32 | fastest (engine, tok/s) | machine |")
    lines = [head, "| " + " | ".join("---" for _ in head.strip("|").split("|")) + " |"]
    for r in rows:
        ci = r["speedup_ci95"]
        lines.append(f"| {r['set']} | {r['n']} | {r['method']} | {f(r['tau'])} | {f(r.get('cycle_cost'))} | "
                     f"{f(r['tokens_per_s'], '{:.1f}')} "
                     f"({f(r['baseline_tokens_per_s'], '{:.1f}')}) | {f(r['speedup'], '{:.2f}x')} | "
                     + (f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-")
                     + f" | {f(r.get('vanilla_speedup'), '{:.2f}x')}"
                     + f" | {f(r['prompt_lookup_speedup'], '{:.2f}x')} (tau {f(r['prompt_lookup_tau'])}) | "
                     f"{f(r['mismatches'], '{}')} | {f(r.get('fp32_parted'), '{}')} | "
                     f"{_fastest_cell(r.get('fastest'))} | {'quiet' if r['quiet'] else 'BUSY'} |")
    return "\n".join(lines)


def _fastest_cell(f: dict | None) -> str:
    """The set's fastest method, its engine and tokens/s, and where ours is not it, ours against it."""
    if not f:
        return "-"
    cell = f"{f['method']} ({f['engine']}, {f['tokens_per_s']:.1f})"
    ours = f["by_engine"].get("ours")
    if ours and f["engine"] != "ours":
        cell += f"; ours {ours['tokens_per_s'] / f['tokens_per_s']:.2f}x"
    return cell


def write_sets_plot(reports: dict[str, dict], path: str):
    """Speedup over hf-greedy per prompt set, one bar per method, with 95% intervals."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(reports)
    methods = [m for m in next(iter(reports.values()))["methods"] if m != BASELINE]
    colors = {"hf-prompt-lookup": "#999999", "vanilla": "#cccccc"}
    palette = ["#0072B2", "#56B4E9", "#009E73", "#E69F00", "#CC79A7"]
    hatch = {"hf-prompt-lookup": "//"}
    fig, ax = plt.subplots(figsize=(max(8, 2.3 * len(names) + 2), 5))
    w = 0.8 / max(1, len(methods))
    for j, m in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for i, n in enumerate(names):
            s = reports[n]["methods"].get(m, {})
            if s.get("speedup") is None:
                continue
            ci = s.get("speedup_ci95") or [s["speedup"], s["speedup"]]
            xs.append(i + (j - (len(methods) - 1) / 2) * w)
            ys.append(s["speedup"])
            lo.append(s["speedup"] - ci[0])
            hi.append(ci[1] - s["speedup"])
        c = colors.get(m, palette[j % len(palette)])
        ax.bar(xs, ys, w, color=c, hatch=hatch.get(m), edgecolor="black", lw=0.5, label=m,
               yerr=[lo, hi], capsize=3, error_kw={"lw": 1})
        for x, y, h in zip(xs, ys, hi):
            ax.annotate(f"{y:.2f}x", (x, y + h), ha="center", va="bottom", fontsize=7, xytext=(0, 1),
                        textcoords="offset points")
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{n}\n(n={reports[n]['config']['n_prompts']})" for n in names])
    ax.set_ylabel(f"speedup over {BASELINE} (mean per-prompt ratio, 95% CI)")
    ax.legend(fontsize=8, loc="upper left", ncol=len(methods))
    busy = [n for n, r in reports.items() if not r.get("load", {}).get("quiet", True)]
    first = next(iter(reports.values()))
    dev = "\n".join(textwrap.wrap(first["device"], 110))   # the kernels' description is long: never clipped
    fig.suptitle(f"EAGLE Lens bench on every prompt set: {dev}\n{first['config'].get('date')}  ·  "
                 f"max_new_tokens {first['config'].get('max_new_tokens')}  ·  T={first['config'].get('temperature')}"
                 + (f"  ·  BUSY MACHINE during {', '.join(busy)}: not evidence" if busy else ""), fontsize=9)
    ax.set_ylim(0, max(2.0, ax.get_ylim()[1]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    quiet_libraries()
    ap = argparse.ArgumentParser(prog="python -m eagle_core.bench.sets", description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--data", default=DATA, help="folder of the <set>_question.jsonl files")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--out", default=os.path.join("assets", "bench"))
    ap.add_argument("--head", default="shifted", help="head of the eagle-* methods: shifted (shipped) | PATH")
    ap.add_argument("--head-eagle3", default="eagle3",
                    help="head of the eagle-*:eagle3 methods: eagle3 (shipped) | PATH")
    ap.add_argument("--allow-busy", action="store_true")
    ap.add_argument("--wait-quiet", type=float, default=60.0)
    ap.add_argument("--from-json", action="store_true",
                    help="run nothing: rebuild the table and the chart from OUT/sets_<set>_t0_cpu.json")
    args = ap.parse_args(argv)
    argv_s = sys.argv[1:] if argv is None else argv
    if args.from_json:   # runs nothing: needs the reports, not the prompt sets (a clone may have neither copy)
        return _rebuild_from_json([s.strip() for s in args.sets.split(",") if s.strip()], args.out)
    try:
        methods, sets, prompts = _checked_inputs(args)
    except (BenchError, ValueError, OSError) as exc:
        return fail(str(exc))
    before, refused = check_quiet(args.wait_quiet, args.allow_busy)
    if refused is not None:
        return refused
    command = "python -m eagle_core.bench.sets " + shlex.join(argv_s)
    reports, device = _run_sets(args, methods, sets, prompts, before, command)
    return _write_summary(reports, args.out, command, device)


def _checked_inputs(args) -> tuple[list[str], list[str], dict]:
    """(methods, set names, {set: prompts}) from the command line; BenchError for what is missing."""
    methods = parse_methods(args.methods)
    if BASELINE not in methods:
        raise BenchError(f"the methods must include the baseline {BASELINE}")
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    if not os.path.isdir(args.data) and args.data != DATA:
        raise BenchError(f"no prompt-set folder {args.data!r}")
    # without ../shared/data (a fresh clone elsewhere) each set comes from the user's cache or its public source
    prompts = {s: load_prompts(os.path.join(args.data, f"{s}_question.jsonl") if os.path.isdir(args.data)
                               else set_path(s), args.limit) for s in sets}
    if not os.path.isdir(args.out):
        raise BenchError(f"output folder {args.out!r} does not exist")
    return methods, sets, prompts


def _rebuild_from_json(sets: list[str], out: str) -> int:
    """--from-json: the table and the chart again from the sets' reports in OUT, running nothing."""
    if not sets:
        return fail("no prompt set named (--sets)")
    try:
        reports = {}
        for s in sets:
            with open(os.path.join(out, f"sets_{s}_t0_cpu.json")) as f:
                reports[s] = json.load(f)
    except (OSError, ValueError) as exc:
        return fail(f"cannot read a report: {exc}")
    return _write_summary(reports, out, reports[sets[0]]["config"].get("command", ""), reports[sets[0]]["device"])


def _run_sets(args, methods, sets, prompts, before, command: str) -> tuple[dict, str]:
    """({set: report}, device): the benchmark on every set with one target, heads and tree; each report is
    printed and written to OUT/sets_<set>_t0_cpu.json as soon as it is done."""
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    from ..decoding.engine import default_config
    from ..model.head import resolve_head
    from ..model.target import load_target
    target = load_target()
    base = default_config(target.device.type, target.numerics)
    need = {method_head_shift(m) for m in methods} - {None}
    specs = {"shifted": args.head, "unshifted": "unshifted", "eagle3": args.head_eagle3}
    heads = {s: resolve_head(specs[s], target) for s in need}
    device = device_string(target)
    from .llamacpp import start_llamacpp     # llama.cpp's methods where asked for (none: no engines)
    engines = start_llamacpp(target, heads.get("eagle3"), methods, log=lambda t: print(t, file=sys.stderr))
    reports = {}
    for s in sets:
        print(f"[{s}] {len(prompts[s])} prompts ...", file=sys.stderr, flush=True)
        config = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "command": command,
                  "prompts": os.path.join(args.data, f"{s}_question.jsonl"), "limit": args.limit,
                  "heads": {k: h.path for k, h in heads.items()}, "kernel_plan": target.kernel_plan,
                  "tree_fitted_on": _tree_fitted_on(base.tree)}
        if engines:
            config["llamacpp"] = {m: e.note() for m, e in engines.items()}
        rep = run_bench(target, prompts[s], methods, heads, base_cfg=base, max_new_tokens=args.max_new_tokens,
                        progress=False, device=device, config=config, load_before=before,
                        warn=lambda t: print(f"WARNING: {t}", file=sys.stderr), engines=engines)
        if engines and rep.get("pass_split"):     # llama.cpp's pass split beside ours (llama-bench, after the runs)
            from .pass_split import llamacpp_pass_split
            rep["llamacpp_pass_split"] = llamacpp_pass_split(next(iter(engines.values())).target_gguf,
                                                             rep["pass_split"])
        before = machine_load.measure_idle(1.0)   # the next set's own check before it starts
        reports[s] = rep
        print(format_table(rep), file=sys.stderr)
        with open(os.path.join(args.out, f"sets_{s}_t0_cpu.json"), "w") as f:
            json.dump(rep, f, indent=1)
    return reports, device

def _write_summary(reports: dict, out: str, command: str, device: str) -> int:
    """The combined table (stdout and OUT/sets_t0_cpu.md) and chart (OUT/sets_t0_cpu.png) of the sets' reports."""
    rows = [set_row(s, rep, best_eagle(rep) or "eagle-static") for s, rep in reports.items()]
    table = format_rows(rows)
    first = next(iter(reports.values()))
    costs = "\n".join(format_pass_costs(first.get("pass_costs"))[1:])
    if costs:
        table += ("\n\nvanilla = our plain decoding with our kernels (speedup over hf-greedy: the kernels alone); "
                  "mismatches = the EAGLE method's prompts whose tokens differ from its reference's "
                  f"({first['config'].get('mismatch_reference')}); parts from fp32 = prompts on which vanilla's "
                  "tokens part from stock fp32 hf-greedy's (two numerical models; margins in the JSON)\n\n"
                  f"```\n{costs}\n```")
    print(table)
    for s, rep in reports.items():
        w = machine_load.warning(rep.get("load") or {})
        if w:
            print(f"{s}: {w}")
    with open(os.path.join(out, "sets_t0_cpu.md"), "w") as f:
        f.write(f"<!-- {command} ; {device} -->\n{table}\n")
    write_sets_plot(reports, os.path.join(out, "sets_t0_cpu.png"))
    print(f"wrote {out}/sets_<set>_t0_cpu.json, sets_t0_cpu.md, sets_t0_cpu.png", file=sys.stderr)
    return 0


def _tree_fitted_on(tree: str) -> str | None:
    from .tree_fit import TREES_DIR
    try:
        with open(os.path.join(TREES_DIR, f"{tree}.json")) as f:
            return json.load(f)["fitted_on"]["prompts"]
    except (OSError, KeyError, ValueError):
        return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
