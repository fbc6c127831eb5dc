#!/usr/bin/env bash
# The test suite (tiny random models, plus a few integration tests on the embedded SmolLM2-135M target).
set -euo pipefail
cd "$(dirname "$0")"
exec .venv/bin/python -m pytest -q --durations=15 tests "$@"
