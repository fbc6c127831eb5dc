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


def test_merge_reports_joins_heads_of_comparable_runs(tmp_path):
    """Heads measured in two runs join one table (a later head replaces a same-named one); runs on other prompts,
    token counts or shapes are refused, and the CLI says so without a stack trace."""
    import json

    from eagle_core.bench.head_compare import main, merge_reports
    shape = lambda t: {"chain-2": {"tau": t, "alpha": [0.5], "accept_length_counts": [1], "mismatches": 0}}  # noqa: E731
    base = {"prompts": "p", "limit": 10, "max_new_tokens": 96, "numerics": "float32"}
    a = base | {"command": "run a", "heads": {"x": shape(1.5), "s": shape(1.7)}, "cards": {"x": {"alpha": [0.4]}},
                "head_paths": {"x": "X", "s": "S"}}
    b = base | {"command": "run b", "heads": {"y": shape(2.0), "s": shape(1.7)}, "cards": {"y": None},
                "head_paths": {"y": "Y", "s": "S"}}
    m = merge_reports([a, b])
    assert list(m["heads"]) == ["x", "s", "y"] and m["commands"] == ["run a", "run b"]
    assert m["heads"]["y"]["chain-2"]["tau"] == 2.0 and m["cards"]["x"] == {"alpha": [0.4]}
    assert merge_reports([m])["commands"] == ["run a", "run b"]            # a merged report merges again
    for k, v in (("max_new_tokens", 64), ("prompts", "q"), ("heads", {"z": {"dynamic": shape(1)["chain-2"]}})):
        with pytest.raises(BenchError, match="differ"):
            merge_reports([a, b | {k: v}])
    pa, pb, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    pa.write_text(json.dumps(a)), pb.write_text(json.dumps(b | {"limit": 5}))
    assert main(["--merge", str(pa), str(pb), "--json", str(out)]) == 2 and not out.exists()
    pb.write_text(json.dumps(b))
    assert main(["--merge", str(pa), str(pb), "--json", str(out)]) == 0
    assert set(json.loads(out.read_text())["heads"]) == {"x", "s", "y"}
