"""Where the repository's files are: one place, so no module computes it from its own depth."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(REPO, "assets")
HEADS = os.path.join(ASSETS, "heads")
TREES = os.path.join(ASSETS, "trees")
BENCH = os.path.join(ASSETS, "bench")
# the benchmark prompt sets (MT-bench, HumanEval, GSM8K, Alpaca) are read from the workplace's shared folder beside
# the repository, which asks that they are not copied into it; every command also takes a path
SHARED_DATA = os.path.normpath(os.path.join(REPO, "..", "shared", "data"))
