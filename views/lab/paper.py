"""The papers' own numbers, copied from the papers' text (EAGLE arXiv 2401.15077 v3 / ICML 2024; EAGLE-2 arXiv
2406.16858 v2; EAGLE-3 arXiv 2503.01840) with the table or figure they come from. Only numbers the papers print are
here: values that exist only as plotted points (EAGLE Figures 7-8, EAGLE-2 Figure 5) are described, never read off a
plot."""
PAPER_INPUT_SPEEDUP = {   # EAGLE Figure 4: Vicuna 7B, MT-bench, T = 0
    "feature & shifted token": 2.8, "token only": 1.5, "feature only": 1.9}
PAPER_CALIBRATION = [     # EAGLE-2 §3.2 (Figure 6's text): Vicuna 7B on Alpaca
    {"confidence": "below 0.05", "x": 0.025, "acceptance": 0.04},
    {"confidence": "above 0.95", "x": 0.975, "acceptance": 0.98}]
PAPER = {
    "inputs": "**The paper (EAGLE §4.3.2, Figures 4 and 8; Vicuna 7B, MT-bench):** four draft heads that differ only "
              "in their input. At T = 0 the speedups are 1.5× (token only), 1.9× (feature only) and 2.8× (feature & "
              "shifted token) (Figure 4); feature & unshifted token has the feature-only head's 0-α but a "
              "much better 1-α (Figure 8, plotted only). For reference, the released EAGLE head on Vicuna 7B "
              "(with its tree) has τ 3.94, 0-α 0.79, 1-α 0.74 (Table 2) and runs 2.90× (Table 7).",
    "data": "**The paper (EAGLE §4.3.3, Table 6; LLaMA2-Chat 7B, MT-bench, T = 0):** fixed ShareGPT answers give "
            "2.78× and τ 3.62; answers written by the target itself give 2.88× and τ 3.75: a little better, so "
            "EAGLE trains on the fixed dataset.",
    "tree": "**The paper (EAGLE §4.3.1, Table 5 and Figure 7; MT-bench, T = 0):** on Vicuna 7B a chain reaches τ "
            "3.20 and the tree 3.94 (+0.74); over six targets the tree adds 0.6-0.8 to τ and about 0.3-0.5 to the "
            "speedup, which is 2.3-2.7× even without a tree.",
    "positions": "**The paper (EAGLE-2 §3.1, Figure 5; Vicuna 7B on Alpaca):** acceptance is highest at P1 (top "
                 "left of the tree) and lowest at P6 (bottom right), and the same position varies widely from "
                 "query to query (the figure plots one point per query; no numbers are printed).",
    "calibration": "**The paper (EAGLE-2 §3.2, Figure 6; Vicuna 7B on Alpaca):** draft tokens with confidence below "
                   "0.05 are accepted about 4% of the time, those above 0.95 about 98%: the confidence is a "
                   "well-calibrated estimate of acceptance (the two ◇ points on our curve).",
    "batch": "**The paper (EAGLE §4.4, Table 7; Vicuna 7B and LLaMA2-Chat 70B on GPUs, MT-bench, T = 0):** the "
             "speedup shrinks slowly as the batch grows from 1 to 4, and at the largest batch the GPU's memory holds "
             "EAGLE still doubles the throughput (about 2×). Speculation pays while the target's pass is bound by "
             "reading its weights, so the drafted tokens ride along nearly free; once a batch fills the compute "
             "(the target saturates), every drafted token costs real work and rejected ones are lost. EAGLE-3 "
             "reports 1.38× throughput at batch 64 in SGLang.",
}
PAPER_NUMBERS_NOTE = ("The papers' numbers are for 7B targets on a GPU with heads trained on far more data; ours are "
                      "a 135M target on this CPU, so compare the direction of each effect, not its size.")
PAPER_EAGLE3_TAU = {   # EAGLE-3 (arXiv 2503.01840) Table 2: ablation on LLaMA-Instruct 3.1 8B, MT-bench, T = 0
    "EAGLE-2": 4.05, "+ training-time test": 5.37, "+ fused features (EAGLE-3)": 6.13}
PAPER["eagle3"] = ("**The paper (EAGLE-3 §4, Table 2; LLaMA-Instruct 3.1 8B, MT-bench, T = 0):** EAGLE-2's head "
                   "accepts τ 4.05 tokens per target pass; training it on its own outputs (training-time test, "
                   "no feature loss) raises τ to 5.37, and reading the target's low, middle and high layers "
                   "(fused features) to 6.13. Its acceptance no longer falls with depth: a head trained on its own "
                   "drafts stops compounding its errors.")
