#!/usr/bin/env bash
# The test suite (tiny random models, plus a few integration tests on the embedded SmolLM2-135M target).
#   ./run_tests.sh            everything, as CI does: two phases (below)
#   ./run_tests.sh ARGS...    one pytest run with ARGS (a file, -k, -m "not slow and not browser", ...)
set -uo pipefail
cd "$(dirname "$0")"
PYTEST=(.venv/bin/python -m pytest -q -rsx --durations=25)   # -rsx: every skip and xfail with its reason
if [ $# -gt 0 ]; then
  for a in "$@"; do   # a file or folder given: run just that (else the whole tests/ folder, filtered by -m / -k)
    case "$a" in -*) ;; *) [ -e "${a%%::*}" ] && exec "${PYTEST[@]}" "$@" ;; esac
  done
  exec "${PYTEST[@]}" tests "$@"
fi
# Phase 1: the tests that share a machine well, on one worker per core (a file stays on one worker, so its module
# fixtures load once; one torch thread per worker, as the app runs on a 2-core box). Phase 2: the ones that measure
# the machine or time a live server (marked serial) run alone, after it. Phase 3: the browser tests (each drives
# Chromium against its own app server; their waits bound only hangs), a file per worker.
export PYTHONUNBUFFERED=1   # progress reaches a log as it happens (a run cut off by a time limit shows how far it got)
workers=$(.venv/bin/python -c "import os; print(max(1, min(4, os.cpu_count() or 1)))")
t0=$SECONDS
OMP_NUM_THREADS=1 "${PYTEST[@]}" -n "$workers" --dist loadfile -m "not serial and not browser" tests
rc1=$?
t1=$SECONDS
"${PYTEST[@]}" -m "serial" tests
rc2=$?
t2=$SECONDS
OMP_NUM_THREADS=1 "${PYTEST[@]}" -n "$workers" --dist loadfile -m "browser and not serial" tests
rc3=$?
echo "phase 1 (parallel): exit $rc1 in $((t1 - t0)) s; phase 2 (serial): exit $rc2 in $((t2 - t1)) s;" \
     "phase 3 (browser, parallel): exit $rc3 in $((SECONDS - t2)) s"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ]
