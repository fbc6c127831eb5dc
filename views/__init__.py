"""Figures and HTML for EAGLE Lens. Every function takes plain records (dataclasses or dicts), never a model."""
from .ambiguity import (ambiguity_dist_figure, ambiguity_figure, ambiguity_headline, ambiguity_html,
                        ambiguity_payoff_figure)
from .mask import mask_figure
from .probs import default_node, node_choices, probs_figure
from .stats import race_figure, stats_figure, stats_html, summary
from .text import text_html
from .tree import tree_figure

__all__ = ["ambiguity_dist_figure", "ambiguity_figure", "ambiguity_headline", "ambiguity_html",
           "ambiguity_payoff_figure", "mask_figure", "default_node", "node_choices", "probs_figure", "race_figure",
           "stats_figure", "stats_html", "summary", "text_html", "tree_figure"]
