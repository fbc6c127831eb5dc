"""Fitting a static tree to measured rank paths (eagle_core.bench.tree_fit)."""
from eagle_core.decoding.presets import children_of_path
from eagle_core.decoding.records import TreeNode, CycleRecord
from eagle_core.bench.tree_fit import expected_tau, fit_tree, prefix_counts, rank_path


def _node(i, parent, depth, q, status):
    return TreeNode(index=i, token_id=100 + i, text=str(i), parent=parent, depth=depth, q=q, p=0.0, score=0.0,
                    status=status)


def test_rank_path_reads_sibling_ranks_by_q():
    nodes = [_node(0, -1, 0, 1.0, "root"), _node(1, 0, 1, 0.2, "rejected"), _node(2, 0, 1, 0.7, "rejected"),
             _node(3, 0, 1, 0.5, "accepted"), _node(4, 3, 2, 0.9, "accepted"), _node(5, 3, 2, 0.05, "rejected")]
    rec = CycleRecord(cycle=1, prefix_len=5, nodes=nodes, accepted_path=[3, 4], accepted_tokens=[103, 104],
                      bonus_token=7, bonus_text="7", bonus_kind="bonus", residual_topk=[], new_tokens=[103, 104, 7],
                      accept_length=2, draft_seconds=0, verify_seconds=0, other_seconds=0, total_new_tokens=3,
                      target_forwards=2, tau=1.5)
    assert rank_path(rec) == (1, 0)      # node 3 is the 2nd most likely of its siblings, node 4 the 1st


def test_fit_tree_takes_the_most_frequent_prefixes_and_predicts_tau():
    paths = [(0, 0, 0)] * 5 + [(1, 0)] * 3 + [(0, 1)] * 2 + [()] * 4 + [(2,)]
    counts = prefix_counts(paths)
    assert counts[(0,)] == 7 and counts[(0, 0)] == 5 and counts[(1, 0)] == 3
    tree = fit_tree(paths, 4)
    children_of_path(tree)               # a valid static tree: parents present, sibling ranks 0..k-1
    assert tree == [[0], [1], [0, 0], [0, 0, 0]]
    # accepted prefix per cycle: (0,0,0)->3, (1,0)->1, (0,1)->1, ()->0, (2,)->0
    assert abs(expected_tau(paths, tree) - (1 + (5 * 3 + 3 + 2) / 15)) < 1e-12
    # more nodes never lower the fitted tau, and the full set of prefixes reproduces the observed acceptance
    taus = [expected_tau(paths, fit_tree(paths, n)) for n in range(1, 9)]
    assert taus == sorted(taus)
    assert abs(expected_tau(paths, [list(p) for p in counts]) - (1 + sum(len(p) for p in paths) / len(paths))) < 1e-12


def test_fit_tree_never_skips_a_sibling_rank():
    paths = [(2,)] * 10 + [(0,)] * 2 + [(1,)]   # rank 2 is frequent, but a tree holding it must hold 0 and 1
    assert fit_tree(paths, 1) == [[0]]
    tree = fit_tree(paths, 3)
    children_of_path(tree)
    assert tree == [[0], [1], [2]]
