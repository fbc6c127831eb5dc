"""Paper-lab figures, drawn from the JSON `python -m eagle_core.lab` writes (or the same dict computed live).

No model code: every function takes plain dicts (eagle_core.lab.measure's report or its parts) and returns a Plotly
figure or Markdown. By job: style.py (the lab's type, series styles and frame), paper.py (the papers' own numbers),
acceptance.py (EAGLE-2's observations), ablations.py (EAGLE's ablations, tree against chain, the CPU tree sizes),
serving.py (vLLM panels, this engine's rounds), eagle3.py (EAGLE-3 against EAGLE-1), engines.py (our engine beside
llama.cpp). `views.lab.X` names them all.
"""
from .ablations import (chains_note, compare_runs, data_finding, data_table, input_depths, input_taus, inputs_finding,
                        inputs_table, sizes_table, tree_finding)
from .acceptance import (accept_histogram, bench_histograms, position_heatmap, positions_finding, reliability,
                         row_names)
from .engines import (engines_costs, engines_figure, engines_finding, engines_table, split_figure, split_finding,
                      split_table)
from .eagle3 import EAGLE3_STYLES, eagle3_depths, eagle3_finding, eagle3_table, head_label
from .paper import PAPER, PAPER_CALIBRATION, PAPER_EAGLE3_TAU, PAPER_INPUT_SPEEDUP, PAPER_NUMBERS_NOTE
from .serving import batch_sweep, engine_batch_sweep, engine_batch_table, serving_counters, sweep_table
from .style import KIND_STYLES, LAB_FONT, MIN_REACHED, TEXT_PX, lab_layout, short_prompt, sub

__all__ = ["chains_note", "compare_runs", "data_finding", "data_table", "input_depths", "input_taus", "inputs_finding",
           "inputs_table", "sizes_table", "tree_finding",
           "accept_histogram", "bench_histograms", "position_heatmap", "positions_finding", "reliability", "row_names",
           "engines_costs", "engines_figure", "engines_finding", "engines_table", "split_figure", "split_finding",
           "split_table",
           "EAGLE3_STYLES", "eagle3_depths", "eagle3_finding", "eagle3_table", "head_label",
           "PAPER", "PAPER_CALIBRATION", "PAPER_EAGLE3_TAU", "PAPER_INPUT_SPEEDUP", "PAPER_NUMBERS_NOTE",
           "batch_sweep", "engine_batch_sweep", "engine_batch_table", "serving_counters", "sweep_table",
           "KIND_STYLES", "LAB_FONT", "MIN_REACHED", "TEXT_PX", "lab_layout", "short_prompt", "sub"]
