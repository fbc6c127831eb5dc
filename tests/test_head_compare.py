"""bench/head_compare.py: heads side by side on the same prompts and tree shapes (tiny target, random heads)."""
from __future__ import annotations

import pytest
import torch

from conftest import TinyTokenizer, oracle_pair
from eagle_core.bench.errors import BenchError
from eagle_core.bench.head_compare import compare, format_table, parse_heads
from eagle_core.model.head import random_head


def test_parse_heads():
    assert parse_heads("a=shifted, b=runs/x") == {"a": "shifted", "b": "runs/x"}
    assert parse_heads("eagle3") == {"eagle3": "eagle3"}
    for bad in ("", "a=x,a=y", "=x"):
        with pytest.raises(BenchError):
            parse_heads(bad)


def test_compare_reports_tau_per_head_and_shape():
    """The oracle head drafts the target exactly (long accepted paths), a random head almost never: the report
    says so per shape, and every output equals plain decoding's."""
    target, oracle = oracle_pair(TinyTokenizer(64), vocab_size=64, embed_scale=8.0)
    heads = {"oracle": oracle, "random": random_head(target, "shifted", seed=3)}
    prompts = [[3, 5, 7], [11, 2], [40, 41, 42, 43]]
    res = compare(target, heads, ["chain-2", "mc_sim_7b_63"], prompts, max_new_tokens=20)
    for shape in ("chain-2", "mc_sim_7b_63"):
        assert res["oracle"][shape]["mismatches"] == 0 and res["random"][shape]["mismatches"] == 0
        assert res["oracle"][shape]["tau"] > res["random"][shape]["tau"] + 0.5
    assert res["oracle"]["chain-2"]["tau"] <= 3.0 + 1e-9          # a 2-node chain accepts at most 2 + bonus
    assert res["oracle"]["mc_sim_7b_63"]["tau"] > res["oracle"]["chain-2"]["tau"]   # depth 5 beats depth 2
    table = format_table({"heads": res})
    assert "| oracle |" in table and "tau mc_sim_7b_63" in table
