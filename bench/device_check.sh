#!/usr/bin/env bash
# One-shot check of afbench's CUDA paths on a real GPU (issue 13). Run it on a CUDA machine from
# the repository root; it never runs in CI or in the tests.
#
#   bench/device_check.sh [OUT_DIR]       # default OUT_DIR: ${OUT:-/tmp/afbench-device-check}
#
# What it does, each step under its own time limit so that one hang costs only that step:
#   1. installs afbench beside the machine's own torch (a CUDA build is fine): from the wheels in
#      .whl/ when the machine has no package index (bench/device_wheels.sh downloads them), else
#      with pip as the README says;
#   2. prints the GPU, torch, CUDA and Triton versions (versions.txt);
#   3. runs the tests that have CUDA branches;
#   4. runs sft_af_compare, infer_rmsnorm_compare and infer_graph_compare with backend=cuda (the
#      graph variant must capture and replay CUDA graphs: a SKIPPED npugraph_ex is a failure of
#      this check), then a 2x2 sweep of autofuse x add_rmsnorm with verdict.rounds=3;
#   5. packs every output directory and log, without the bulky traces, into one archive
#      (device_check.tar.gz) plus summary.txt, which is what a lent machine can send back.
#
# Environment: DEVICE_CHECK_BACKEND (default cuda; `cpu` exercises the script itself on a CPU
# machine), DEVICE_CHECK_STEPS (only the named steps, e.g. "versions infer_rmsnorm"),
# DEVICE_CHECK_SCALE=small (fewer steps: for the CPU self-test).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-/tmp/afbench-device-check}}"
BACKEND="${DEVICE_CHECK_BACKEND:-cuda}"
STEPS="${DEVICE_CHECK_STEPS:-install versions tests sft infer_rmsnorm infer_graph sweep}"
WORK="$(mktemp -d /tmp/afbench-device-check.XXXXXX)"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: >"$SUMMARY"
export PYTHONUNBUFFERED=1
PY="${DEVICE_CHECK_PYTHON:-python3}"

note() { echo "$*" | tee -a "$SUMMARY"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }

# run NAME LIMIT_S CMD...: one step, its output in $WORK/logs/NAME.log, its status in summary.
run() {
  local name="$1" limit="$2"; shift 2
  mkdir -p "$WORK/logs"
  local t0=$SECONDS
  timeout --kill-after=15 "$limit" "$@" >"$WORK/logs/$name.log" 2>&1
  local rc=$?
  note "step $name: exit $rc after $((SECONDS - t0)) s (limit $limit s)"
  tail -n 25 "$WORK/logs/$name.log" | sed 's/^/    /' >>"$SUMMARY"
  return $rc
}

if want install; then
  if [ -d .whl ]; then
    # no package index on a lent machine: afbench's missing dependencies travel as wheels
    run install 240 bash -c "$PY -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl \
      && PYTHONPATH=/tmp/site $PY -m pip install -q --no-deps --no-build-isolation --target /tmp/site ."
    export PYTHONPATH=/tmp/site
  else
    run install 600 bash -c "$PY -m pip install -q -e '.[test]'"
  fi
fi

if want versions; then
  run versions 120 "$PY" - <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", "capability", f"{p.major}.{p.minor}")
try:
    import triton
    print("triton", triton.__version__)
except ImportError:
    print("triton not installed")
import transformers, hydra, pydantic
print("transformers", transformers.__version__, "hydra", hydra.__version__, "pydantic", pydantic.VERSION)
EOF
  cp "$WORK/logs/versions.log" "$OUT_DIR/versions.txt" 2>/dev/null
fi

if want tests; then
  run tests 300 "$PY" -m pytest -q -x tests/test_backends_npu_cuda.py tests/test_devices.py \
    tests/test_converters.py -p no:cacheprovider
fi

# Small settings keep the whole script inside one 10-minute call on a GPU; the CPU self-test
# uses fewer steps still.
if [ "${DEVICE_CHECK_SCALE:-}" = small ]; then
  SFT_STEPS="experiment.phases.train.scheduler.steps=6 experiment.phases.profile.scheduler.steps=8"
  SWEEP_STEPS="scheduler.steps=4 scheduler.measure.first_step=3 scheduler.measure.last_step=4 verdict.rounds=2"
else
  SFT_STEPS=""
  SWEEP_STEPS="scheduler.steps=8 scheduler.measure.first_step=4 scheduler.measure.last_step=8 verdict.rounds=3"
fi
export AFBENCH_LOCK_DIR="$WORK/locks"
mkdir -p "$AFBENCH_LOCK_DIR"

if want sft; then
  # shellcheck disable=SC2086
  run sft 420 "$PY" -m afbench experiment=sft_af_compare backend="$BACKEND" \
    hydra.run.dir="$WORK/runs/sft_af_compare" $SFT_STEPS
fi
if want infer_rmsnorm; then
  run infer_rmsnorm 240 "$PY" -m afbench experiment=infer_rmsnorm_compare backend="$BACKEND" \
    hydra.run.dir="$WORK/runs/infer_rmsnorm_compare"
fi
if want infer_graph; then
  run infer_graph 300 "$PY" -m afbench experiment=infer_graph_compare backend="$BACKEND" \
    hydra.run.dir="$WORK/runs/infer_graph_compare"
  if [ "$BACKEND" = cuda ] && grep -q "npugraph_ex.*SKIPPED" "$WORK/logs/infer_graph.log"; then
    note "FAIL: npugraph_ex was SKIPPED on cuda: CUDA graphs did not capture"
  fi
fi
if want sweep; then
  # shellcheck disable=SC2086
  run sweep 420 "$PY" -m afbench -m optimization.autofuse=false,true \
    optimization.add_rmsnorm=false,true backend="$BACKEND" $SWEEP_STEPS \
    hydra.sweep.dir="$WORK/runs/sweep"
fi

# Reports, summaries, tables and logs come back; chrome traces and compiler caches do not.
tar -C "$WORK" --exclude='cache' --exclude='tmp' --exclude='*.json.gz' --exclude='*trace*.json' \
  --exclude='*.pt.trace.json' -czf "$OUT_DIR/device_check.tar.gz" runs logs 2>/dev/null
note "archive: $OUT_DIR/device_check.tar.gz ($(du -h "$OUT_DIR/device_check.tar.gz" | cut -f1))"
for f in "$WORK"/runs/*/summary.json; do
  [ -f "$f" ] && note "$(basename "$(dirname "$f")"): $("$PY" -c "import json,sys; s=json.load(open(sys.argv[1])); print('; '.join(s.get('headline', [])))" "$f")"
done
[ -f "$WORK/runs/sweep/sweep_report.md" ] && cp "$WORK/runs/sweep/sweep_report.md" "$OUT_DIR/"
rm -rf "$WORK"
