"""Static tree presets: a fitted tree file with no drafted node is refused, never read as a tree, and an empty
choice list is a configuration error, never the 25-node default tree in disguise."""
import json
import warnings

import pytest

from eagle_core.decoding.draft import DraftSpec
from eagle_core.decoding.presets import MC_SIM_7B_63, load_fitted_trees


def test_an_empty_fitted_tree_file_is_skipped_with_a_warning(tmp_path):
    (tmp_path / "empty.json").write_text(json.dumps({"choices": []}))
    (tmp_path / "good.json").write_text(json.dumps({"choices": [[0], [1], [0, 0]]}))
    with pytest.warns(UserWarning, match=r"skipping tree file .*empty\.json: it has no drafted nodes"):
        trees = load_fitted_trees(str(tmp_path))
    assert trees == {"good": [[0], [1], [0, 0]]}


def test_a_good_fitted_tree_loads_without_a_warning(tmp_path):
    (tmp_path / "good.json").write_text(json.dumps({"choices": [[0], [0, 0]]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_fitted_trees(str(tmp_path)) == {"good": [[0], [0, 0]]}


def test_an_empty_static_tree_is_refused_not_replaced_by_the_default():
    spec = DraftSpec(kind="static", choices=[])
    with pytest.raises(ValueError, match="at least one drafted node"):
        spec.static_choices()
    with pytest.raises(ValueError):
        spec.max_nodes
    assert DraftSpec(kind="static").static_choices() == MC_SIM_7B_63          # None still means the default
    assert DraftSpec(kind="static", choices=[[0]]).static_choices() == [[0]]


def test_fitted_dynamic_settings_feed_the_cpu_default(tmp_path, monkeypatch):
    from eagle_core.decoding import engine, presets
    monkeypatch.setattr(presets, "DYNAMIC_DIR", str(tmp_path))
    assert presets.fitted_dynamic() == {}
    assert engine.default_config("cpu").depth == engine.DecodeConfig().depth     # nothing fitted: the defaults
    (tmp_path / "smollm2-cpu.json").write_text(json.dumps({"depth": 4, "top_k": 4, "total_tokens": 8, "tau": 2.1}))
    assert presets.fitted_dynamic() == {"depth": 4, "top_k": 4, "total_tokens": 8}
    cfg = engine.default_config("cpu")
    assert (cfg.depth, cfg.top_k, cfg.total_tokens) == (4, 4, 8) and cfg.draft == "static"
    (tmp_path / "smollm2-cpu.json").write_text("{not json")
    assert presets.fitted_dynamic() == {}


def test_dynamic_fit_measures_real_decoding(tiny_target, tiny_random_head):
    from eagle_core.bench.dynamic_fit import measure
    from eagle_core.decoding.engine import DecodeConfig
    row = measure(tiny_target, tiny_random_head, [{"prompt": "Hi"}, {"prompt": "Tell me a story"}], 3, 2, 4, 6,
                  DecodeConfig())
    assert (row["depth"], row["top_k"], row["total_tokens"]) == (3, 2, 4)
    assert row["tau"] >= 1.0 and row["cycle_ms"] > 0
    assert row["tokens_per_s_model"] == pytest.approx(row["tau"] / row["cycle_ms"] * 1e3, rel=0.02)


def test_the_cpu_default_tree_follows_the_targets_numerics(monkeypatch):
    """A CPU target on the GGUF block kernels drafts the tree fitted to their pass costs (a pass grows dearer per
    token there than on the fp32 plan); any other numerics, or no q4 fit, the fp32 fit; no fit at all, cpu-4."""
    from eagle_core.decoding import engine
    from eagle_core.decoding.presets import TREE_PRESETS, tree_presets
    presets = dict(tree_presets())
    assert engine.default_config("cpu", "gguf-blocks").tree == "smollm2-cpu-q4"
    assert presets["smollm2-cpu-q4"] != presets["smollm2-cpu"]
    assert engine.default_config("cpu", "float32").tree == engine.default_config("cpu").tree == "smollm2-cpu"
    # and its draft runs the block kernel too (Q8_0 copies of the head); elsewhere the fp32 head, bf16 draft LM head
    assert engine.default_config("cpu", "gguf-blocks").draft_dtype == "q8"
    assert engine.default_config("cpu", "float32").draft_dtype == engine.default_config("cpu").draft_dtype == "mixed"
    monkeypatch.delitem(TREE_PRESETS, "smollm2-cpu-q4")
    assert engine.default_config("cpu", "gguf-blocks").tree == "smollm2-cpu"
    monkeypatch.delitem(TREE_PRESETS, "smollm2-cpu")
    assert engine.default_config("cpu", "gguf-blocks").tree == "cpu-4"
