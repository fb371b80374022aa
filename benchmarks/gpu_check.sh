#!/usr/bin/env bash
# One-run GPU proof (at most 8 minutes on one H100/H200-class GPU; each stage has its own timeout):
#   1. the kernels tests with the Triton backend compiled for the GPU (no interpreter)   <= 130 s
#   2. benchmarks/attention.py at Wan-1.3B shapes: grid 21x30x52, 12 heads, bf16,
#      density 0.125, Triton vs SDPA's flash backend; prints its table and JSON line      <= 90 + 45 s
#   3. benchmarks/gpu_e2e.py: an end-to-end render of the Wan 2.1 1.3B architecture with
#      random weights at 832x480, 33 frames, 4 steps: dense vs sparse vs sparse + step cache
#      (skipped with a message where the checkout has no --cache) and sparse under model and
#      group offload; seconds per step, peak GPU memory, PSNR against dense, one JSON line each <= 200 s
#
# Usage (from anywhere):  benchmarks/gpu_check.sh            # d=128 (Wan-1.3B)
#                         benchmarks/gpu_check.sh --d 64     # d=64
#                         benchmarks/gpu_check.sh --bench-only [--d 64]   # no kernels tests
#                         benchmarks/gpu_check.sh --no-e2e                # stages 1-2 only
# Exit status: the first failing stage's (the later stages still run).
set -uo pipefail
cd "$(dirname "$0")/.."

D=128
RUN_TESTS=1
RUN_E2E=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --d) D="$2"; shift 2 ;;
    --bench-only) RUN_TESTS=0; shift ;;
    --no-e2e) RUN_E2E=0; shift ;;
    *) echo "unknown argument: $1 (expected --d 64|128, --bench-only, --no-e2e)" >&2; exit 2 ;;
  esac
done

unset TRITON_INTERPRET  # compile for the GPU
# videogen must be installed (`pip install -e .`: kernels/ installs as videogen.kernels); the
# checkout's root on PYTHONPATH would not map it, and lets transformers 5 take kernels/ for
# Hugging Face's `kernels` package.
python - <<'PY' || exit 1
import torch
import videogen.kernels  # noqa: F401  (pip install -e . first)
assert torch.cuda.is_available(), "gpu_check.sh needs a CUDA GPU"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
PY

STATUS=0
stage() {  # stage NAME SECONDS COMMAND...: run it under a timeout, remember the first failure
  local name="$1" limit="$2"; shift 2
  local start=$SECONDS
  echo "== $name (limit ${limit} s)"
  timeout "$limit" "$@"
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  if [[ $rc -ne 0 && $STATUS -eq 0 ]]; then STATUS=$rc; fi
}

if [[ "$RUN_TESTS" == 1 ]]; then
  stage "kernels tests on the GPU" 130 python -m pytest tests/kernels -q -x -p no:cacheprovider
fi

stage "attention benchmark, d=$D" 90 python benchmarks/attention.py --grid 21,30,52 --heads 12 --d "$D" \
  --dtype bf16 --density 0.125 --backend triton --repeats 20
# Dense-equivalence sanity at full density (same kernel, every tile selected).
stage "attention at density 1.0, d=$D" 45 python benchmarks/attention.py --grid 21,30,52 --heads 12 --d "$D" \
  --dtype bf16 --density 1.0 --backend triton --repeats 5

if [[ "$RUN_E2E" == 1 ]]; then
  stage "end-to-end Wan 2.1 1.3B architecture (random weights), 832x480x33, 4 steps" 200 \
    python benchmarks/gpu_e2e.py --steps 4 --frames 33 --size 832x480
fi
# The peak-memory estimate's constants against what the GPU holds (CPU figures: docs/architecture.md).
stage "activation memory: measured vs estimate" 90 python benchmarks/memory.py
echo "gpu_check.sh: total $SECONDS s, exit $STATUS"
exit "$STATUS"
