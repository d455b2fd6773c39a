#!/usr/bin/env bash
# Issue 6's cuda checks, in one call on a machine with a GPU (the lent device machine runs
# it from the repository root; $OUT, where set, is the folder whose files come back):
#   bash benchmarks/cuda_check.sh
# 1. benchmarks/cuda_check.py: every zoo model x planner algorithm on the cuda backend
#    (tolerance check + 50 jittered runs each), removed waits, emit --target cuda code;
# 2. parastream calibrate --device cuda; parastream run medusa_heads --auto --device cuda
#    --check --jitter 50 --trace DIR (the demo's model) and moe_layer, with the in-process
#    calibration and with the calibrated profile; parastream analyze on what they captured.
# Needs torch with cuda; msgspec is installed from ./.whl when that folder is there.
set -u
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
P="python3 -m parastream"
nvidia-smi -L
python3 -c "import torch, msgspec, pyarrow, rich; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 1
# CUDA_CHECK_SKIP="zoo removed_wait emit" skips sections of cuda_check.py (a rerun)
timeout 200 python3 benchmarks/cuda_check.py --out "$OUT/cuda_check.json" \
  ${CUDA_CHECK_SKIP:+--skip $CUDA_CHECK_SKIP} 2>&1 \
  | grep -v '^USDT' | tee "$OUT/cuda_check.log"
T=/tmp/cuda-traces; rm -rf $T; mkdir -p $T
echo "== parastream calibrate --device cuda --repeat 3" | tee "$OUT/run.log"
timeout 120 $P calibrate --device cuda --repeat 3 -o $T/h200-calibrated.json 2>&1 \
  | grep -v '^USDT' | tee -a "$OUT/run.log" | tail -5
for m in medusa_heads moe_layer; do
  echo "== parastream run $m --auto --device cuda --check --jitter 50"
  timeout 150 $P run $m --auto --device cuda --check --jitter 50 --runs 15 \
    --trace $T/$m --json $T/$m-run.json 2>&1 | grep -v '^USDT' | tee -a "$OUT/run.log"
  echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
  echo "== the same with --profile (calibrate --device cuda --repeat 3)" | tee -a "$OUT/run.log"
  timeout 150 $P run $m --auto --device cuda --runs 15 --profile $T/h200-calibrated.json \
    --json $T/$m-run-profile.json 2>&1 | grep -v '^USDT' | tee -a "$OUT/run.log" | tail -8
  for f in $T/$m/*.json; do
    b=$(basename $f .json)
    case $b in plan|single|single-torch) continue;; esac
    case $b in
      *-torch) args="--baseline $T/$m/single-torch.json";;
      *) args="--baseline $T/$m/single.json --plan $T/$m/plan.json";;
    esac
    echo "== parastream analyze $m/$b.json $args" | tee -a "$OUT/analyze.log"
    timeout 60 $P analyze $f $args 2>&1 | tee -a "$OUT/analyze.log" | tail -25
    echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/analyze.log"
  done
done
tar czf "$OUT/cuda-traces.tgz" -C /tmp cuda-traces
ls -la "$OUT"
