"""EAGLE Lens: watch EAGLE speculative decoding draft and verify, cycle by cycle.

    python app.py [--port 7860] [--share] [--target embedded|tiny|PATH] [--head shifted|random|PATH]
                  [--load-sized-trees]

The entry point: arguments, model loading (in the background while the page shows a recorded run) and launch.
The page is built by tabs/ (tabs/page.py: the frame; one module per tab), its figures and HTML by views/, and all
model work is eagle_core/'s.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

# the names tests and scripts reach through `app`
from eagle_core.serving.loading import MODEL, Model, load_model, start_loading, tiny_target  # noqa: E402,F401
from tabs.race import race_divergence, race_sameness  # noqa: E402,F401
from tabs.page import CSS, build_demo, launch  # noqa: E402,F401


def main(argv=None):
    ap = argparse.ArgumentParser(description="EAGLE Lens: EAGLE speculative decoding, cycle by cycle.")
    ap.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    ap.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    ap.add_argument("--share", action="store_true")
    ap.add_argument("--target", default=os.environ.get("EAGLE_LENS_TARGET"),
                    help="embedded (default: SmolLM2-135M-Instruct), tiny (random, for tests), or a folder/hub id")
    ap.add_argument("--head", default=os.environ.get("EAGLE_LENS_HEAD", "shifted"),
                    help="shifted (shipped head) | random | PATH; the unshifted ablation head is the shipped one")
    ap.add_argument("--load-sized-trees", action="store_true",
                    help="start with the class's trees sized by the load (also EAGLE_LENS_LOAD_SIZED_TREES=1; off: "
                         "every student drafts the tree they set; the teacher's link switches it either way)")
    args = ap.parse_args(argv)
    if args.load_sized_trees:       # (the environment variable is read once, where the loop is made)
        from eagle_core.serving.rounds import LOOP
        LOOP.load_sized = True
    if os.environ.get("SPACE_ID"):
        args.host = "0.0.0.0"
    start_loading(args.target, args.head)
    launch(build_demo(), args.host, args.port, args.share)


if __name__ == "__main__":
    main()
