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
