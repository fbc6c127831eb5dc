"""Copy the measured MT-bench figures of each head from the benchmark's JSON into its training card.

    python scripts/card_benchmarks.py assets/bench/mt_bench_t0_cpu.json [more.json ...]
The numbers are read from the benchmark output, never typed.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARDS = {"shifted": "assets/heads/smollm2-135m-shifted/training.json",
         "unshifted": "assets/heads/smollm2-135m-unshifted/training.json"}

for path in sys.argv[1:]:
    bench = json.load(open(path))
    cfg = bench["config"]
    key = f"mt_bench_T{cfg['temperature']:g}"
    for shift, card_path in CARDS.items():
        card_file = os.path.join(HERE, card_path)
        card = json.load(open(card_file))
        rows = {}
        for name, m in bench["methods"].items():
            if not name.startswith("eagle-"):
                continue
            if (name.endswith(":unshifted")) != (shift == "unshifted"):
                continue
            rows[name.split(":")[0]] = {"tau": round(m["tau"], 3), "speedup_vs_hf_greedy": round(m["speedup"], 3),
                                        "tokens_per_s": round(m["tokens_per_s"], 2),
                                        "alpha_by_depth": [None if a is None else round(a, 3) for a in m["accept_rate_by_depth"]]}
        if not rows:
            continue
        card.setdefault("benchmarks", {})[key] = {
            "source": os.path.relpath(path, HERE), "command": cfg["command"], "date": cfg["date"],
            "device": bench["device"], "prompts": cfg["n_prompts"], "max_new_tokens": cfg["max_new_tokens"],
            "tree": cfg["tree"], "methods": rows}
        with open(card_file, "w") as f:
            json.dump(card, f, indent=1)
        print(f"{card_path}: {key} {rows}")
