#!/usr/bin/env bash
# Issue 6's cuda checks, in one call on a machine with a GPU (the lent device machine runs
# it from the repository root; $OUT, where set, is the folder whose files come back):
#   bash benchmarks/cuda_check.sh
# 1. parastream calibrate --device cuda --repeat 3; parastream demo --device cuda;
# 2. parastream run medusa_heads (the demo's model) and moe_layer --auto --device cuda
#    --check --jitter 50 --trace DIR, with the in-process calibration and with the
#    calibrated profile; parastream analyze on what they captured;
# 3. benchmarks/cuda_check.py: every zoo model x planner algorithm on the cuda backend
#    (tolerance check + 50 jittered runs each), removed waits, emit --target cuda code, the
#    executor's overhead over torch.fx.Interpreter and the stream calls' host costs.
# Needs torch with cuda; msgspec is installed from ./.whl when that folder is there.
# CUDA_CHECK_SKIP="zoo removed_wait emit overhead micro_costs" skips parts of step 3.
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
T=/tmp/cuda-traces; rm -rf $T; mkdir -p $T
echo "== parastream calibrate --device cuda --repeat 3" | tee "$OUT/run.log"
timeout 60 $P calibrate --device cuda --repeat 3 -o $T/h200-calibrated.json 2>&1 \
  | grep -v '^USDT' | tee -a "$OUT/run.log" | tail -3
echo "== parastream demo --device cuda" | tee -a "$OUT/run.log"
timeout 90 $P demo --device cuda --out $T/demo --no-progress 2>&1 | grep -v '^USDT' \
  | tee -a "$OUT/run.log" | tail -14
echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
for m in medusa_heads moe_layer; do
  echo "== parastream run $m --auto --device cuda --check --jitter 50" | tee -a "$OUT/run.log"
  timeout 90 $P run $m --auto --device cuda --check --jitter 50 --runs 15 \
    --trace $T/$m --json $T/$m-run.json 2>&1 | grep -v '^USDT' | tee -a "$OUT/run.log" \
    | grep -E "evidence|recommendation"
  echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
  echo "== the same with --profile (calibrate --device cuda --repeat 3)" | tee -a "$OUT/run.log"
  timeout 60 $P run $m --auto --device cuda --runs 15 --profile $T/h200-calibrated.json \
    --json $T/$m-run-profile.json 2>&1 | grep -v '^USDT' | tee -a "$OUT/run.log" | tail -4
  for f in $T/$m/*.json; do
    b=$(basename $f .json)
    case $b in plan|single|single-torch) continue;; esac
    case $b in
      *-torch) args="--baseline $T/$m/single-torch.json";;
      *) args="--baseline $T/$m/single.json --plan $T/$m/plan.json";;
    esac
    echo "== parastream analyze $m/$b.json $args" >> "$OUT/analyze.log"
    timeout 30 $P analyze $f $args >> "$OUT/analyze.log" 2>&1
    echo "rc $?" >> "$OUT/analyze.log"
  done
done
tar czf "$OUT/cuda-traces.tgz" -C /tmp cuda-traces
# CUDA_CHECK_SKIP="zoo removed_wait emit" skips sections of cuda_check.py (a rerun)
timeout 150 python3 benchmarks/cuda_check.py --out "$OUT/cuda_check.json" \
  ${CUDA_CHECK_SKIP:+--skip $CUDA_CHECK_SKIP} 2>&1 | grep -v '^USDT' > "$OUT/cuda_check.log"
grep -E "SUMMARY|^\{'device'" "$OUT/cuda_check.log"
grep -E "^== |^wall |^verdict|^plan check|: side \[" "$OUT/analyze.log" | cut -c1-150
ls -la "$OUT"
