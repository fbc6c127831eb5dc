"""The Paper lab tab: the papers' findings measured on this app's model, painted from assets/lab.json at once, and
recomputed live (one cycle per model turn) on typed prompts."""
from __future__ import annotations

import dataclasses

import gradio as gr

import views
import views.lab as vl
from eagle_core.decoding.engine import default_config
from eagle_core.lab.measure import chain_heads, lab_plan
from eagle_core.lab.names import prompt_names
from eagle_core.bench.batch_sweep import batch_finding
from eagle_core.lab.serving import counters_finding, sweep_finding
from eagle_core.serving import generation
from eagle_core.serving.errors import UserError
from eagle_core.serving.loading import MODEL, lab_heads
from eagle_core.serving.turns import queue_note

from .common import load_json, shown, unexpected

LAB = load_json("lab.json")   # written by `python -m eagle_core.lab`
LAB_VLLM = load_json("lab_vllm.json")   # written by `python -m eagle_core.lab.serving` (needs vLLM's environment)
# written by `python -m eagle_core.bench.head_compare` (docs/benchmarks.md, "EAGLE-3 against EAGLE-1")
HEADS_EAGLE3 = load_json("bench", "heads_eagle3.json")
LAB_ENGINES = load_json("bench", "llamacpp_sharegpt_t0_cpu.json")   # the benchmark with llama.cpp's methods
LAB_ENGINES_Q4 = load_json("bench", "llamacpp_sharegpt_t0_cpu_q4.json")   # the same, our target on the GGUF blocks
LAB_BATCH = load_json("lab_batch.json")   # written by `python -m eagle_core.bench.batch_sweep` (this engine's rounds)
# its prompts' text, from the shared prompt set it names (not copied here), else their set and id
LAB_NAMES = prompt_names(LAB or {})
LAB_PROMPTS = ("Explain how a bicycle stays upright while it moves.\nWrite a short poem about autumn rain.\n"
               "What are three tips for learning a new language?\nDescribe how to make a good cup of tea.\n"
               "Why is the sky blue? Answer for a ten-year-old.\nList five uses of a paper clip.")
LAB_MAX_PROMPTS = 10
LAB_LIVE_TOKENS = 64     # new tokens per prompt in a live recompute (the shipped JSON used the CLI's 96)
# the panels a live recompute redraws, in the order of its outputs
LAB_MEASURED = ("inputs", "inputs_narrow", "inputs_tau", "inputs_md", "tree", "tree_md", "heat", "rel", "pos_md", "hist",
                "bench_hist")
LAB_PLAN_NAMES = [name for name, _, _ in lab_plan(default_config("cpu"))]   # the generations of a recompute


def load_bench_histograms(method: str = "eagle-static") -> dict:
    """{prompt set: {"counts", "alpha", "method"}} from the shipped benchmark JSONs
    (`python -m eagle_core.bench.sets`: assets/bench/sets_<set>_t0_cpu.json) that carry the histogram."""
    from eagle_core.bench.sets import SETS
    out = {}
    for name in SETS:
        try:
            m = load_json("bench", f"sets_{name}_t0_cpu.json")["methods"][method]
        except (TypeError, KeyError):
            continue
        if m.get("accept_length_counts"):
            out[name] = {"counts": m["accept_length_counts"], "alpha": m.get("accept_rate_by_depth"),
                         "method": method}
    return out


BENCH_HIST = load_bench_histograms()


def lab_figures(report: dict | None, names: dict | None = None) -> dict:
    """The Paper lab's panels from a lab report: input kinds (figure + table), data phases, tree vs chain, tree
    sizes, positions heatmap (rows named by `names`: {prompt id: prompt text}), reliability curve, accepted-length
    histograms (EAGLE-1's tree; the benchmark's configuration)."""
    if not report:
        empty = views.common.empty_figure("No lab measurements shipped; press Recompute")
        return {"inputs": empty, "inputs_narrow": empty, "inputs_tau": empty, "inputs_md": "", "data": "", "tree": empty, "tree_md": "",
                "sizes": "", "heat": empty, "rel": empty, "pos_md": "", "hist": empty, "bench_hist": empty}
    bench = report.get("bench_histogram")
    why = vl.chains_note(chain_heads(report))
    return {"inputs": vl.input_depths(report["inputs"]),
            "inputs_narrow": vl.input_depths(report["inputs"], horizontal=True),   # a phone's (views/page.py CSS)
            "inputs_tau": vl.input_taus(report["inputs"]),
            "inputs_md": vl.inputs_table(report["inputs"], vl.PAPER_INPUT_SPEEDUP) + "\n\n**What it shows:** "
                         + vl.inputs_finding(report["inputs"]) + (f"\n\n{why}" if why else ""),
            "data": vl.data_table(report.get("data") or {}) + "\n\n" + vl.data_finding(report.get("data") or {}),
            "tree": vl.compare_runs(report["tree_vs_chain"], "5 drafted tokens: a tree against a chain"
                                    + vl.sub("the shipped shifted head"), report.get("plain")),
            "tree_md": vl.tree_finding(report["tree_vs_chain"]) + (f"\n\n{why}" if why else ""),
            "pos_md": vl.positions_finding(report["positions"], report.get("calibration_error")),
            "sizes": vl.sizes_table(report.get("tree_sizes")),
            "heat": vl.position_heatmap(report["positions"], names=names),
            "rel": vl.reliability(report["calibration"], report.get("calibration_error"), vl.PAPER_CALIBRATION),
            "hist": vl.accept_histogram(report["histogram"], "EAGLE-1's 25-node tree"),
            "bench_hist": vl.accept_histogram(bench, f"the benchmark's configuration ({bench['config']})")
            if bench else views.common.empty_figure("Not in this lab report; press Recompute")}


def serving_sections(report: dict | None) -> dict:
    """The two serving panels' figures and text from the lab's vLLM report (None: not measured here)."""
    if not report:
        empty = views.common.empty_figure("Not measured: run python -m eagle_core.lab.serving (README, vLLM)")
        return {"counters": empty, "counters_md": "", "sweep": empty, "sweep_md": "", "source": ""}
    v = report.get("vllm") or {}
    load = report.get("load") or {}
    busy = "" if load.get("quiet", True) else " **The machine was busy during this run: its timings are not evidence.**"
    source = (f"Measured by `{report.get('command')}` on {report.get('date')} ({report.get('device')}; vLLM "
              f"{v.get('version')}, {'compiled' if v.get('compiled') else 'eager'}, {v.get('dtype')}, "
              f"{report.get('wall_s', 0) / 60:.0f} min). It needs vLLM's own environment "
              f"(`scripts/setup_vllm.sh`), so the page shows the shipped run and does not recompute it.{busy}")
    sweep = report["sweep"]
    return {"counters": vl.serving_counters(report["counters"]),
            "counters_md": "**What it shows:** " + counters_finding(report["counters"]["compare"]),
            "sweep": vl.batch_sweep(sweep),
            "sweep_md": vl.sweep_table(sweep) + "\n\n**What it shows:** " + sweep_finding(sweep["rows"]),
            "source": source}


def engine_batch_section(report: dict | None, vllm: dict | None) -> dict:
    """This engine's batch sweep: the figure beside vLLM's, its table, its computed sentence and its source."""
    if not report or not report.get("rows"):
        return {"fig": views.common.empty_figure("Not measured: python -m eagle_core.bench.batch_sweep"), "md": ""}
    vsweep = (vllm or {}).get("sweep")
    busy = max(report.get("load_before") or [0])
    md = (vl.engine_batch_table(report) + "\n\n**What it shows:** " + batch_finding(report, (vsweep or {}).get("rows"))
          + f"\n\nMeasured by `{report.get('command')}` on {report.get('date')} ({report.get('cpu')}, "
            f"{report.get('threads')} threads, {report.get('numerics')}; {report.get('wall_s', 0) / 60:.0f} min; load "
            f"average before it {busy:.1f}). Throughput: the tokens every student received over the rounds' wall "
            "time, prefills left out (the same for all three).")
    return {"fig": vl.engine_batch_sweep(report, vsweep), "md": md}


def eagle3_section(report: dict | None) -> dict:
    """Panel 8's figure and text from the head comparison's JSON (None: not measured in this clone)."""
    if not report or not report.get("heads"):
        return {"depths": views.common.empty_figure("Not measured: python -m eagle_core.bench.head_compare"),
                "md": "", "source": ""}
    finding = vl.eagle3_finding(report)
    return {"depths": vl.eagle3_depths(report),
            "md": vl.eagle3_table(report) + (f"\n\n**What it shows:** {finding}" if finding else ""),
            "source": "Measured by `python -m eagle_core.bench.head_compare` (the command and the training: "
                      "docs/benchmarks.md and docs/training.md)."}


def engines_section(report: dict | None) -> dict:
    """Panel 9 from the benchmark run with llama.cpp's methods (docs/benchmarks.md): both engines' tokens/s and
    pass costs, the table and the computed sentence (None: not measured in this clone)."""
    if not report or not report.get("methods"):
        return {"fig": views.common.empty_figure("Not measured: python -m eagle_core.bench --methods "
                                                 "vanilla,eagle-static,llamacpp,llamacpp-eagle3 (docs/benchmarks.md)"),
                "md": "", "split": None, "split_md": ""}
    cfg = report.get("config") or {}
    finding = vl.engines_finding(report, vl.engines_costs(report))
    md = (vl.engines_table(report) + (f"\n\n**What it shows:** {finding}" if finding else "")
          + f"\n\nMeasured by `{cfg.get('command')}` on {cfg.get('date')} ({cfg.get('threads')} threads): one run, "
            "the same prompts for every method; llama.cpp's tokens/s and τ from its own counters, its pass costs "
            "from llama-bench (the mean of a few runs), ours the best of a few.")
    split = vl.split_figure(report) if report.get("pass_split") or report.get("llamacpp_pass_split") else None
    split_md = (vl.split_table(report) + f"\n\n**What it shows:** {vl.split_finding(report)}\n\n"
                + SPLIT_NOTE) if split else ""
    return {"fig": vl.engines_figure(report, vl.engines_costs(report)), "md": md, "split": split,
            "split_md": split_md}


SPLIT_NOTE = ("Ours: the products (every linear layer, the LM head included) and the attention over the cache (the "
              "layer body's attend: rotary and the cache append included) timed around each call in the benchmark's "
              "own passes; the rest (the other "
              "operations) and Python between them share what is left as torch.profiler saw it. llama.cpp: "
              "llama-bench's means; its attention over the cache is its pass after the 256-token context less the "
              "same pass after none, and its products and other operations are one number, since its build prints "
              "no per-operation times (eagle_core/bench/pass_split.py).")


def lab_source(report: dict | None) -> str:
    if not report:
        return ""
    return (f"Measured by `{report.get('command')}` on {report.get('date')}: {report.get('n_prompts')} prompts, "
            f"{report.get('max_new_tokens')} new tokens each, T = 0.")


def lab_cost_note(report: dict | None) -> str:
    """What a live recompute will run, and what the shipped run took per generation (measured, not guessed)."""
    note = f"A live recompute runs {len(LAB_PLAN_NAMES)} generations per prompt ({LAB_LIVE_TOKENS} new tokens each)"
    if report and report.get("wall_s") and report.get("n_prompts"):
        per = report["wall_s"] / (report["n_prompts"] * len(LAB_PLAN_NAMES))
        note += (f"; the shipped run took {per:.1f} s per generation of {report.get('max_new_tokens')} tokens "
                 f"(model loading included) on the machine that wrote it")
    return note + "."


def lab_prompts(text, n) -> tuple[list[str], str]:
    """The prompts a recompute runs, and a note when fewer than asked for are run."""
    prompts = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    try:
        n = int(n)
    except (TypeError, ValueError):
        raise UserError("The number of prompts must be a number.") from None
    if not prompts:
        raise UserError("Type at least one prompt (one per line).")
    note = ""
    if n > len(prompts) or n > LAB_MAX_PROMPTS or n < 1:
        note = f" (asked for {n}; ran {min(max(n, 1), len(prompts), LAB_MAX_PROMPTS)})"
    prompts = prompts[:max(1, min(n, LAB_MAX_PROMPTS))]
    if any(len(p) > 2000 for p in prompts):
        raise UserError("Keep each prompt under 2,000 characters.")
    return prompts, note


class LabTab:
    def __init__(self, state):
        self.state = state   # the session state: the session histogram reads the Lens tab's cycles

    def build(self):
        lab0 = lab_figures(LAB, LAB_NAMES)
        with gr.Tab("Paper lab", id="lab"):
            gr.Markdown("The papers' findings, measured on this app's real model and heads, beside the papers' own "
                        "numbers. " + lab_source(LAB) + " " + vl.PAPER_NUMBERS_NOTE)
            gr.Markdown("### 1. What the draft head should see\n" + vl.PAPER["inputs"]
                        + "\n\n**Here:** four heads trained from scratch with one recipe and one budget, differing "
                          "only in what they read, each drafting a chain of 5 (T = 0). The shipped heads the Lens "
                          "tab uses were trained longer.")
            with gr.Row():   # two figures in a row: side by side on a laptop, stacked on a phone
                # upright bars, and on a phone the same bars lying down (CSS shows one: views/page.py)
                self.inputs = gr.Plot(lab0["inputs"], label="Input kinds: acceptance per depth", scale=3,
                                      min_width=340, elem_classes=["el-wide-only"])
                self.inputs_narrow = gr.Plot(lab0["inputs_narrow"], label="Input kinds: acceptance per depth",
                                             scale=3, min_width=340, elem_classes=["el-narrow-only"])
                self.inputs_tau = gr.Plot(lab0["inputs_tau"], label="Input kinds: τ", scale=2, min_width=300)
            self.inputs_md = gr.Markdown(lab0["inputs_md"])
            gr.Markdown("### 2. Fixed data against the target's own answers\n" + vl.PAPER["data"]
                        + "\n\n**Here:** the shipped heads' training phases, from their training cards.")
            gr.Markdown(lab0["data"])
            gr.Markdown("### 3. A tree against a chain, and how big a tree\n" + vl.PAPER["tree"]
                        + "\n\n**Here:** A tree spends its tokens on a second guess where the first is unsure; a "
                          "chain bets everything on one path. A CPU pays for every verified token, so its best "
                          "tree is small; a GPU verifies a wide tree almost for free.")
            with gr.Row():
                self.tree = gr.Plot(lab0["tree"], label="Tree vs chain")
                gr.Markdown(lab0["sizes"])
            self.tree_md = gr.Markdown(lab0["tree_md"])
            gr.Markdown("### 4. EAGLE-2: acceptance depends on position and context; confidence predicts it\n"
                        + vl.PAPER["positions"] + "\n\n" + vl.PAPER["calibration"]
                        + "\n\n**Here:** EAGLE-1's 25-node tree, every cycle of every prompt.")
            self.heat = gr.Plot(lab0["heat"], label="Acceptance per tree position and prompt")
            self.rel = gr.Plot(lab0["rel"], label="Reliability")
            self.pos_md = gr.Markdown(lab0["pos_md"])
            gr.Markdown("### 5. How many tokens a cycle accepts\nThe per-position histogram serving-engine users ask "
                        "for: from the benchmark itself (`python -m eagle_core.bench.sets --limit 20`, assets/bench/), "
                        "from the lab's runs (EAGLE-1's tree; the benchmark's configuration on the lab's prompts), "
                        "and from this session's own cycles (button below).")
            if BENCH_HIST:
                gr.Plot(vl.bench_histograms(BENCH_HIST), label="Accepted length (the benchmark, every prompt set)")
            with gr.Row():
                self.hist = gr.Plot(lab0["hist"], label="Accepted length (EAGLE-1's tree)")
                self.bench_hist = gr.Plot(lab0["bench_hist"],
                                          label="Accepted length (the benchmark's configuration, lab prompts)")
            with gr.Row():
                self.prompts = gr.Textbox(LAB_PROMPTS, lines=4, label="Prompts for a live recompute (one per line)",
                                          scale=3)
                self.n = gr.Slider(1, LAB_MAX_PROMPTS, value=2, step=1, label="Recompute on N prompts", scale=1)
            with gr.Row():
                self.button = gr.Button("Recompute panels 1, 3, 4, 5 live", variant="primary", elem_id="el-lab")
                self.session_btn = gr.Button("Histogram of this session's cycles")
            self.session_hist = gr.Plot(views.common.empty_figure("Step or Run in the Lens tab, then press "
                                                                  "“Histogram of this session's cycles”"),
                                        label="Accepted length (this session)")
            self.msg = gr.Markdown(lab_cost_note(LAB))
            serving = serving_sections(LAB_VLLM)
            gr.Markdown("### 6. The same head in a serving engine\nThe shifted head exported to vLLM "
                        "(`python -m eagle_core.export`, its `fc.bias` folded exactly into the layer's biases) and "
                        "run by vLLM's own EAGLE-1 drafter, beside this app's engine drafting the same chain on the "
                        "same prompts: the same head should accept the same drafts. " + serving["source"])
            gr.Plot(serving["counters"], label="Acceptance per position: vLLM and EAGLE Lens")
            gr.Markdown(serving["counters_md"])
            gr.Markdown("### 7. Where EAGLE stops paying: a full batch\n" + vl.PAPER["batch"]
                        + "\n\n**Here:** vLLM on this machine, plain against EAGLE decoding, the same requests "
                          "at every batch size.")
            gr.Plot(serving["sweep"], label="Throughput per batch size: vLLM plain and EAGLE")
            gr.Markdown(serving["sweep_md"])
            engine = engine_batch_section(LAB_BATCH, LAB_VLLM)
            gr.Markdown("**And in this app's engine**, which serves a classroom the same way: every waiting "
                        "student's tree verified in one target pass per round, each tree either the CPU tree for "
                        "everyone or sized by the load (the docs' Classroom section says how).")
            gr.Plot(engine["fig"], label="Throughput over plain decoding per class size: this engine")
            gr.Markdown(engine["md"])
            e3 = eagle3_section(HEADS_EAGLE3)
            gr.Markdown("### 8. EAGLE-3: training-time test and fused features\n" + vl.PAPER["eagle3"]
                        + "\n\n**Here:** an EAGLE-1 head and an EAGLE-3 head trained from scratch on the same "
                          "ShareGPT conversations for the same time on one GPU (the target's features computed "
                          "batch by batch), beside the longer-trained shipped EAGLE-1 head and the shipped EAGLE-3 head (the "
                          "4-minute one trained on with the target's own answers), drafting on the CPU. "
                          + e3["source"])
            gr.Plot(e3["depths"], label="EAGLE-1 and EAGLE-3: held-out acceptance per depth")
            gr.Markdown(e3["md"])
            eng = engines_section(LAB_ENGINES)
            gr.Markdown("### 9. Beside llama.cpp, the engine CPU users run\nThe same target (the embedded GGUF) and "
                        "our shipped EAGLE-3 head, exported to llama.cpp (`python -m eagle_core.export --head eagle3 "
                        "--engine llama.cpp`), decoded by both engines in one benchmark run on this CPU. Whether "
                        "speculation pays is decided by what a pass of a few tokens costs against a one-token pass "
                        "in each engine.")
            gr.Plot(eng["fig"], label="Our engine and llama.cpp: tokens/s and pass costs")
            gr.Markdown(eng["md"])
            if eng["split"] is not None:
                gr.Plot(eng["split"], label="Where one pass goes: products, attention, the rest, Python")
                gr.Markdown(eng["split_md"])
            if LAB_ENGINES_Q4:
                eng4 = engines_section(LAB_ENGINES_Q4)
                gr.Markdown("#### The same, our engine on the target's own 4-bit blocks\n`EAGLE_LENS_CPU_KERNELS=q4`: "
                            "our linear layers read the GGUF's Q4_1 blocks (the q4 numerical model: the same weights, "
                            "fp32 sums in another order; docs/benchmarks.md), EAGLE drafts the tree fitted to those "
                            "passes' costs, and llama.cpp runs again in the same benchmark run.")
                gr.Plot(eng4["fig"], label="On the 4-bit blocks: tokens/s and pass costs")
                gr.Markdown(eng4["md"])
                if eng4["split"] is not None:
                    gr.Plot(eng4["split"], label="On the 4-bit blocks: where one pass goes")
                    gr.Markdown(eng4["split_md"])
        return self

    @property
    def measured(self) -> list:
        return [getattr(self, k) for k in LAB_MEASURED]

    def on_recompute(self, text, n, progress=gr.Progress()):
        """Every measured panel, live on the typed prompts: the lab's plan (eagle_core.lab.measure.lab_plan) one
        generation after another, one cycle per model turn (other sessions interleave), then the same assembly
        as the CLI."""
        import eagle_core.lab.measure as L
        from eagle_core.model.head import ABLATION_HEADS
        msg = lambda text: {self.msg: text}   # noqa: E731
        try:
            prompts, note = lab_prompts(text, n)
            MODEL.require()
            yield msg("⏳ Loading the lab's four ablation heads…")
            stand_ins = lab_heads()
            base = dataclasses.replace(default_config(MODEL.device_type), max_new_tokens=LAB_LIVE_TOKENS,
                                       record_topk=0)
            plan = lab_plan(base)
            waiting = lambda ahead, w: msg(queue_note(ahead, w))   # noqa: E731
            runs, total, done = {}, len(plan) * len(prompts), 0
            for name, spec, cfg in plan:
                runs[name] = []
                for k, prompt in enumerate(prompts):
                    progress(done / total, desc=f"{name}: prompt {k + 1} of {len(prompts)}")
                    yield msg(f"⏳ Generation {done + 1} of {total}: {name}, prompt {k + 1} of {len(prompts)}…")
                    rs = yield from generation.decode_in_turns(cfg, spec or "shifted", prompt, waiting)
                    runs[name].append((f"prompt {k + 1}", rs))   # named by its text in the heatmap
                    done += 1
            cards = {s: L.read_card(ABLATION_HEADS[s]) for s in L.INPUT_KINDS.values() if s not in stand_ins}
            shipped = L.read_card(str(getattr(MODEL.heads.get("shifted"), "path", "")))   # None for a random head
            data = {"shifted": L.card_phases(shipped)} if shipped else None
            figs = lab_figures(L.assemble(runs, plan, cards, data=data),
                               {f"prompt {k + 1}": p for k, p in enumerate(prompts)})
            text = (f"Recomputed live on {len(prompts)} prompt{'s' if len(prompts) > 1 else ''}{note}, "
                    f"{LAB_LIVE_TOKENS} new tokens each, T = 0: {total} generations.")
            if stand_ins:
                text += f" ⚠ Random stand-ins (the trained heads do not fit this target): {', '.join(stand_ins)}."
            yield {getattr(self, k): figs[k] for k in LAB_MEASURED} | msg(text)
        except UserError as exc:
            yield msg(f"❌ {exc}")
        except GeneratorExit:
            raise
        except Exception as exc:
            yield msg(f"❌ Something went wrong: {unexpected(exc)}")

    def on_session(self, state) -> dict:
        """The accepted-length histogram of this session's own cycles (what the Lens tab decoded), no model work."""
        import eagle_core.lab.measure as L
        state = state or {}
        hist = L.accept_length_histogram(shown(state))
        if not hist["cycles"]:
            return {self.msg: "This session has no drafting cycles yet: Step or Run in the Lens tab first."}
        whose = "This session's" if state.get("source") == "live" else \
            "The recorded run's (shown until you Step or Run)"
        n = hist["cycles"]
        return {self.session_hist: vl.accept_histogram(hist, "this session's cycles"),
                self.msg: f"{whose} {n} cycle{'' if n == 1 else 's'}, with the Lens tab's settings."}

    def wire(self, model_kw: dict):
        self.button.click(self.on_recompute, [self.prompts, self.n], self.measured + [self.msg],
                          api_name="lab_recompute", **model_kw)
        self.session_btn.click(self.on_session, [self.state], [self.session_hist, self.msg], api_name="lab_session",
                               concurrency_limit=None)
