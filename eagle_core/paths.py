"""Where the repository's files are: one place, so no module computes it from its own depth."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(REPO, "assets")
HEADS = os.path.join(ASSETS, "heads")
TREES = os.path.join(ASSETS, "trees")
BENCH = os.path.join(ASSETS, "bench")
PROMPTS = os.path.join(REPO, "data", "prompts")   # the benchmark prompt sets, copied into the repository
