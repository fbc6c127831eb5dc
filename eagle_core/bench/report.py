"""The benchmark's report as text (the table) and as a chart (PNG)."""
from __future__ import annotations

from . import machine_load
from .methods import BASELINE, HF_METHODS
from .metrics import TAU_NOTE
from .pass_cost import format_pass_costs
from .pass_split import format_pass_split


def _f(x, fmt="{:.2f}", none="-"):
    return none if x is None else fmt.format(x)


def cycle_cost(summary: dict, baseline: dict | None) -> float | None:
    """Wall seconds per target forward of a method, in baseline steps (seconds per forward of the baseline):
    what one draft + verify cycle costs in plain decoding steps. speedup ~ tau / cycle_cost."""
    if not baseline or not summary.get("target_forwards") or not baseline.get("target_forwards"):
        return None
    return (summary["seconds"] / summary["target_forwards"]) / (baseline["seconds"] / baseline["target_forwards"])


def load_line(load: dict) -> str:
    """What the load check saw, in one line."""
    f = lambda x: "?" if x is None else f"{x:.2f}"   # noqa: E731
    verdict = "quiet" if load.get("quiet") else "BUSY"
    return (f"machine load: {verdict}: other work {f(load.get('other_cores_before'))} cores before the run, "
            f"{f(load.get('other_cores_mean'))} mean / {f(load.get('other_cores_max'))} max during timed runs "
            f"({load.get('busy_stretches', 0)} of {load.get('stretches', 0)} runs busy; {load.get('cores')} cores, "
            f"{load.get('method')})")


def numerics_lines(nr: dict | None) -> list[str]:
    """Where our numerical model and the stock fp32 reference part (run._numerics_report), in words."""
    if not nr:
        return []
    head = (f"numerics: our engine computes {nr['numerics']} (vanilla and eagle-* alike; eagle-* are checked "
            f"against vanilla); {nr['reference']} parts from vanilla on {nr['parted']} of {nr['prompts']} prompts")
    if not nr["parted"]:
        return ["", head]
    lines = ["", head + f", where the fp32 reference's logits of the two tokens differ by {nr['median_margin']:.3g} "
                        f"(median) / {nr['max_margin']:.3g} (max): two numerical models of the same weights, "
                        "not a decoding error"]
    for d in nr["divergences"][:6]:
        lines.append(f"  prompt {d['prompt']}: token {d['index']}: fp32 {d['fp32_token']!r} vs ours "
                     f"{d['ours_token']!r}, fp32 margin {d['fp32_margin']:.3g}")
    if len(nr["divergences"]) > 6:
        lines.append(f"  ... and {len(nr['divergences']) - 6} more (in the JSON)")
    return lines


# ============================================================================ the table
def format_table(report: dict) -> str:
    """The report as text: its settings and the machine load, one row per method, then acceptance per depth,
    accepted-length histograms, where the time goes and speedup by category (where the report has them)."""
    cfg, ms = report["config"], report["methods"]
    greedy = cfg.get("temperature", 0) == 0
    lines = (_header_lines(report) + format_pass_costs(report.get("pass_costs"), report.get("llamacpp_pass_costs"))
             + format_pass_split(report.get("pass_split"), report.get("llamacpp_pass_split"))
             + _method_rows(ms, cfg, greedy) + fastest_lines(report.get("fastest")) + _counter_lines(ms)
             + numerics_lines(report.get("numerics")) + _acceptance_lines(ms) + _histogram_lines(ms)
             + _time_split_lines(ms) + _category_lines(ms))
    if cfg.get("skipped_prompts"):
        lines.append(f"\nskipped (too long for the context): {len(cfg['skipped_prompts'])} prompts")
    load = report.get("load")
    if load and machine_load.warning(load):
        lines += ["", machine_load.warning(load)]
    return "\n".join(lines)


def _header_lines(report: dict) -> list[str]:
    cfg = report["config"]
    lines = [f"device: {report['device']}",
             f"date: {cfg.get('date')}  target: {cfg.get('target')}  prompts: {cfg.get('n_prompts')}"
             + (f" ({cfg['prompts']})" if cfg.get("prompts") else "")
             + f"  max_new_tokens: {cfg.get('max_new_tokens')}  T: {cfg.get('temperature')}",
             f"heads: {cfg.get('heads')}"]
    if cfg.get("head_note"):
        lines.append(f"NOTE: {cfg['head_note']}")
    v = cfg.get("vllm")
    if v:
        lines.append(f"vLLM {v.get('version')} ({'compiled' if v.get('compiled') else 'eager'}, {v.get('dtype')}, "
                     f"{v.get('methods')}): vllm-eagle / vllm-eagle3 draft a chain of "
                     f"{v.get('num_speculative_tokens')} with the shifted / EAGLE-3 head; LD_PRELOAD "
                     f"{v.get('ld_preload') or 'none'}; reserved CPUs {v.get('reserved_cpus')}; seconds are vLLM's "
                     "generate() alone")
    t = cfg.get("tree", {})
    lines.append(f"tree: static preset {t.get('static_preset')}, chain/dynamic depth {t.get('depth')}, "
                 f"dynamic top_k {t.get('top_k')} / total_tokens {t.get('total_tokens')}")
    load = report.get("load")
    if load:
        lines.append(load_line(load))
        w = machine_load.warning(load)
        if w:
            lines += ["", "!" * 100, w, "!" * 100]
    return lines


def _method_rows(ms: dict, cfg: dict, greedy: bool) -> list[str]:
    head = f"{'method':<24} {'tau*':>6} {'tok/s':>8} {'speedup':>8} {'95% CI':>13}"
    if greedy:
        head += f" {'mismatch':>8} {'ties':>5}"
    head += f" {'n':>4}"
    lines = ["", head, "-" * len(head)]
    for m, s in ms.items():
        ci = s.get("speedup_ci95")
        ci_s = f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci and m != BASELINE else "-"
        row = (f"{m:<24} {_f(s['tau']):>6} {_f(s['tokens_per_s'], '{:.1f}'):>8} {_f(s['speedup'], '{:.2f}x'):>8}"
               f" {ci_s:>13}")
        if greedy:
            row += f" {_f(s['mismatches'], '{}'):>8} {_f(s['tie_divergences'], '{}'):>5}"
        row += f" {s['n_prompts']:>4}"
        lines.append(row)
    lines.append(f"* {TAU_NOTE}; speedup = mean per-prompt tokens/s ratio over {BASELINE} (95% CI: bootstrap "
                 "interval of that mean over the prompts)"
                 + ("; mismatches = prompts whose tokens differ from "
                    f"{cfg.get('mismatch_reference')} (ties = divergences at a top-2 near-tie)" if greedy else ""))
    return lines


def fastest_lines(f: dict | None) -> list[str]:
    """The run's fastest method and engine, each engine's fastest, and ours against the fastest other engine."""
    if not f:
        return []
    by = f["by_engine"]
    lines = ["", f"fastest: {f['method']} ({f['engine']}, {f['tokens_per_s']:.1f} tok/s); by engine: "
             + ", ".join(f"{e} {b['method']} {b['tokens_per_s']:.1f}" for e, b in
                         sorted(by.items(), key=lambda eb: -eb[1]["tokens_per_s"]))]
    others = [b for e, b in by.items() if e != "ours"]
    if "ours" in by and others:
        best = max(others, key=lambda b: b["tokens_per_s"])
        lines.append(f"ours against the fastest other method: {by['ours']['method']} / {best['method']} = "
                     f"{by['ours']['tokens_per_s'] / best['tokens_per_s']:.2f}x")
    return lines


def _counter_lines(ms: dict) -> list[str]:
    """llama.cpp's own draft counters per speculative method; a method that drafted nothing is said to be plain
    decoding."""
    rows = [(m, s["draft_counters"]) for m, s in ms.items() if s.get("draft_counters")]
    if not rows:
        return []
    lines = ["", "llama.cpp's speculative counters (its own: tokens drafted, accepted, verify passes)"]
    for m, c in rows:
        acc = "-" if c["acceptance"] is None else f"{100 * c['acceptance']:.0f}%"
        line = (f"  {m:<24} {c['spec_type'] or '':<14} drafted {c['drafted']:>6}  accepted {c['accepted']:>6} ({acc})"
                f"  cycles {c['cycles']:>6}  prompts drafting {c['prompts_drafting']}/{c['prompts']}")
        if not c["drafted"]:
            line += "  <- drafted nothing: plain decoding in the speculative tool"
        lines.append(line)
    return lines


def _acceptance_lines(ms: dict) -> list[str]:
    acc = [(m, s["accept_rate_by_depth"]) for m, s in ms.items() if s.get("accept_rate_by_depth")]
    if not acc:
        return []
    lines = ["", "acceptance rate per depth (alpha_k: of the cycles reaching depth k, the share whose "
                 "draft at depth k+1 was accepted)"]
    for m, a in acc:
        lines.append(f"  {m:<24} " + " ".join(f"a{k}={_f(x)}" for k, x in enumerate(a)))
    return lines


def _histogram_lines(ms: dict) -> list[str]:
    hist = [(m, s["accept_length_counts"]) for m, s in ms.items() if s.get("accept_length_counts")]
    if not hist:
        return []
    lines = ["", "accepted drafted tokens per cycle (share of cycles, the per-position histogram)"]
    for m, c in hist:
        tot = sum(c) or 1
        lines.append(f"  {m:<24} " + " ".join(f"{k}:{100 * n / tot:3.0f}%" for k, n in enumerate(c))
                     + f"   ({tot} cycles)")
    return lines


def _time_split_lines(ms: dict) -> list[str]:
    split = [(m, s["time_split"]) for m, s in ms.items() if s.get("time_split")]
    if not split:
        return []
    lines = ["", "where the engine's time goes (share of generation wall time: draft / target pass / "
                 "other in-cycle / outside cycles)"]
    for m, t in split:
        tot = sum(t.values()) or 1.0
        cc = cycle_cost(ms[m], ms.get(BASELINE))
        lines.append(f"  {m:<24} " + " / ".join(f"{100 * t[k] / tot:4.0f}%" for k in
                                                ("draft_s", "verify_s", "other_s", "outside_s"))
                     + (f"   a cycle costs {cc:.2f} {BASELINE} steps" if cc is not None else ""))
    return lines


def _category_lines(ms: dict) -> list[str]:
    cats = sorted({c for s in ms.values() for c in s["by_category"]})
    if len(cats) <= 1:
        return []
    lines = ["", "speedup by category"]
    w = max(8, max(len(c) for c in cats) + 1)
    lines.append(f"  {'method':<24}" + "".join(f"{c[:w - 1]:>{w}}" for c in cats))
    for m, s in ms.items():
        lines.append(f"  {m:<24}" + "".join(
            f"{_f(s['by_category'].get(c, {}).get('speedup'), '{:.2f}x'):>{w}}" for c in cats))
    return lines


# ============================================================================ the chart
def write_plot(report: dict, path: str):
    """Two panels: tokens/s per method (tau on each bar) and speedup over the baseline with its 95% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ms = report["methods"]
    names = list(ms)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(9, 1.4 * len(names) + 4), 5.2))
    colors = ["#888888" if m in HF_METHODS or m in ("vanilla", "vllm", "llamacpp") else
              "#d62728" if m.startswith("llamacpp-") else
              "#6a3d9a" if m in ("vllm-eagle", "vllm-eagle3") else
              ("#d9822b" if m.endswith(":unshifted") else "#2b6cd9") for m in names]
    _throughput_panel(ax1, ms, names, colors)
    _speedup_panel(ax2, ms, names, colors)
    for ax in (ax1, ax2):
        ax.set_xticks(list(range(len(names))))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    fig.suptitle(_plot_title(report), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _throughput_panel(ax, ms: dict, names: list[str], colors: list[str]):
    tps = [ms[m]["tokens_per_s"] or 0.0 for m in names]
    ax.bar(range(len(names)), tps, color=colors)
    ax.set_ylabel("tokens / s (prefill included)")
    ax.set_title("throughput")
    for i, m in enumerate(names):
        t = ms[m]["tau"]
        ax.annotate(f"τ={t:.2f}" if t is not None else "τ=n/a", (i, tps[i]), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 2), textcoords="offset points")


def _speedup_panel(ax, ms: dict, names: list[str], colors: list[str]):
    spd = [ms[m]["speedup"] if ms[m]["speedup"] is not None else 0.0 for m in names]
    ax.bar(range(len(names)), spd, color=colors)
    cis = [ms[m].get("speedup_ci95") if m != BASELINE else None for m in names]
    for i, ci in enumerate(cis):
        if ci:
            ax.errorbar(i, spd[i], yerr=[[spd[i] - ci[0]], [ci[1] - spd[i]]], color="black", capsize=3, lw=1)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_ylabel(f"speedup over {BASELINE} (mean per-prompt ratio, 95% CI)")
    ax.set_title("speedup")
    for i in range(len(names)):
        top = cis[i][1] if cis[i] else spd[i]
        ax.annotate(f"{spd[i]:.2f}x", (i, top), ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                    textcoords="offset points")


def _plot_title(report: dict) -> str:
    cfg = report["config"]
    warn = "  ·  RANDOM (untrained) heads" if "random" in str(cfg.get("heads")) else ""
    if report.get("load") and not report["load"].get("quiet", True):
        warn += "  ·  BUSY MACHINE: not evidence"
    return (f"EAGLE Lens bench: {report['device']}{warn}\n{cfg.get('date')}  ·  {cfg.get('n_prompts')} prompts  ·  "
            f"max_new_tokens {cfg.get('max_new_tokens')}  ·  T={cfg.get('temperature')}  ·  "
            f"τ = new tokens per target forward")
