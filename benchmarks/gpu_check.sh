#!/usr/bin/env bash
# GPU check for the kernels package, one short run (< 5 min on one H100/H200-class GPU):
#   1. the kernels tests with the Triton backend compiled for the GPU (no interpreter);
#   2. benchmarks/attention.py at Wan-1.3B shapes: grid 21x30x52, 12 heads, bf16,
#      density 0.125, Triton vs SDPA's flash backend; prints its table and JSON line.
#
# Usage (from anywhere):  benchmarks/gpu_check.sh            # d=128 (Wan-1.3B)
#                         benchmarks/gpu_check.sh --d 64     # d=64
#                         benchmarks/gpu_check.sh --bench-only [--d 64]
set -euo pipefail
cd "$(dirname "$0")/.."

D=128
RUN_TESTS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --d) D="$2"; shift 2 ;;
    --bench-only) RUN_TESTS=0; shift ;;
    *) echo "unknown argument: $1 (expected --d 64|128, --bench-only)" >&2; exit 2 ;;
  esac
done

unset TRITON_INTERPRET  # compile for the GPU
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python - <<'PY'
import torch
assert torch.cuda.is_available(), "gpu_check.sh needs a CUDA GPU"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
PY

if [[ "$RUN_TESTS" == 1 ]]; then
  echo "== kernels tests on the GPU"
  timeout 240 python -m pytest tests/kernels -q -p no:cacheprovider
fi

echo "== attention benchmark, d=$D"
timeout 180 python benchmarks/attention.py --grid 21,30,52 --heads 12 --d "$D" --dtype bf16 \
  --density 0.125 --backend triton --repeats 20
# Dense-equivalence sanity at full density (same kernel, every tile selected).
timeout 120 python benchmarks/attention.py --grid 21,30,52 --heads 12 --d "$D" --dtype bf16 \
  --density 1.0 --backend triton --repeats 5 | tail -n 1
