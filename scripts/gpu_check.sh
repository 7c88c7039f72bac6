#!/usr/bin/env bash
# One prepared command for a lent GPU machine: scripts/gpu_check.sh OUTDIR
#
# The machine brings its own Python and torch (CUDA) and can fetch nothing. This script
#   1. installs only the library itself: pip install --no-deps -e .  (no build isolation,
#      so nothing is downloaded; if that fails, the repository goes on PYTHONPATH instead),
#   2. runs scripts/gpu_check.py: the gpu-marked tests (pytest -m gpu, when pytest exists),
#      benchmarks/bench_cost.py on the device and Chapter 13's per-dtype timings,
#   3. leaves OUTDIR/gpu_check.json (schema in scripts/gpu_check.py), bench_cost.txt,
#      pytest_gpu.txt and pip.log.
# On a machine without CUDA it says so and exits 0. Meant to finish in under 5 minutes;
# GPU_CHECK_TIMEOUT (seconds, default 280) bounds the python part.
set -u
if [ $# -ne 1 ]; then
    echo "usage: scripts/gpu_check.sh OUTDIR" >&2
    exit 2
fi
OUT=$1
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || PY=python
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA device on this machine (torch.cuda.is_available() is False, or no torch); nothing measured"
    exit 0
fi
mkdir -p "$OUT"
if ! "$PY" -m pip install --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1; then
    echo "gpu_check: pip install --no-deps -e . failed (see $OUT/pip.log); using PYTHONPATH=$PWD"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout "${GPU_CHECK_TIMEOUT:-280}" "$PY" scripts/gpu_check.py --out "$OUT" --device cuda
rc=$?
if [ $rc -ne 0 ]; then
    echo "gpu_check: scripts/gpu_check.py exited with $rc (124: the time limit); partial results in $OUT/gpu_check.json"
fi
exit $rc
