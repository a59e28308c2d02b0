#!/usr/bin/env bash
# The one command a lent GPU machine runs (one H200, no network, torch and transformers installed,
# no verl / vLLM / ray / papermill / nbgrader): every GPU stage of the course that needs only
# torch, transformers and peft, on Qwen2.5-0.5B-Instruct's architecture with random weights
# (recorded as `weights: random_init`), each stage in its own process with its own time limit.
#
#   bash benchmarks/gpu/run_device_batch.sh --label L --out DIR          # real_gpu on CUDA
#   bash benchmarks/gpu/run_device_batch.sh --label L --out DIR --rehearse   # the same steps, cpu_smoke, tiny model
#
# Wheels of the pinned transformers / peft / bitsandbytes may be carried in `.whl/`
# (benchmarks/gpu/fetch_wheels.sh makes it); they are installed into /tmp/site first.
# DIR receives records.tar.gz (every record, under its chapter folder), summary.json (each step's
# command, exit code and seconds) and log.txt. The script exits 1 when any step failed; a failed or
# OOM stage is a record too. The verl backend of the shared experiment cannot run here (its stack
# is not installed): the runbook in README.md says where it runs.
set -uo pipefail

LABEL=""; OUT=""; REHEARSE=0; STEP_LIMIT_S="${STEP_LIMIT_S:-150}"
while [ $# -gt 0 ]; do
  case "$1" in
    --label) LABEL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --rehearse) REHEARSE=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$LABEL" ] || [ -z "$OUT" ]; then
  echo "usage: $0 --label LABEL --out DIR [--rehearse]" >&2; exit 2
fi

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
RESULTS="$OUT/results"
LOG="$OUT/log.txt"
: > "$LOG"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export COURSE_MODEL_CACHE="${COURSE_MODEL_CACHE:-/tmp/course-model-cache}"

if [ -d "$REPO/.whl" ] && ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$REPO"/.whl/*.whl >>"$LOG" 2>&1 || { echo "wheel install failed (see $LOG)" >&2; exit 3; }
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi

if [ "$REHEARSE" = 1 ]; then
  MODE=cpu_smoke; DEVICE=cpu; MODEL=tiny; SOURCE=local
else
  MODE=real_gpu; DEVICE=cuda; MODEL=Qwen/Qwen2.5-0.5B-Instruct; SOURCE=random_init
fi

STEPS_JSON="$OUT/.steps.jsonl"
: > "$STEPS_JSON"
FAILED=0

step() {  # step NAME COMMAND...: run with a time limit, log it, record exit code and seconds
  local name="$1"; shift
  local started ended code
  started=$(date +%s.%N)
  echo "=== $name: $*" >>"$LOG"
  timeout --kill-after=10 "$STEP_LIMIT_S" "$@" >>"$LOG" 2>&1
  code=$?
  ended=$(date +%s.%N)
  [ "$code" -ne 0 ] && FAILED=1
  "$PYTHON" -c 'import json,sys; print(json.dumps({"step": sys.argv[1], "exit_code": int(sys.argv[2]),
    "seconds": round(float(sys.argv[4]) - float(sys.argv[3]), 1), "command": sys.argv[5:]}))' \
    "$name" "$code" "$started" "$ended" "$@" >>"$STEPS_JSON"
  echo "$name: exit $code"
}

step environment "$PYTHON" -c 'import json, platform, torch, transformers, peft
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                  "cuda_available": torch.cuda.is_available(), "transformers": transformers.__version__,
                  "peft": peft.__version__,
                  "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}))'

step verl_closure_torch "$PYTHON" -m tools.verl_mechanism_closure --mode run --backend torch --device "$DEVICE" \
  --model "$MODEL" --model-source "$SOURCE" --run-label "$LABEL" --output "$RESULTS/pt_verl_closure/$LABEL.json"

step baseline_73 "$PYTHON" -m tools.experiments.memory_strategy.baseline --run-mode "$MODE" --label "$LABEL" \
  --results-dir "$RESULTS" --model-source "$SOURCE"
for stage in prepare g0 g1 close; do
  step "memory_76_$stage" "$PYTHON" -m tools.experiments.memory_strategy.stages --run-mode "$MODE" --label "$LABEL" \
    --stage "$stage" --results-dir "$RESULTS" --model-source "$SOURCE"
done

for chapter in $(cd "$REPO/tools/experiments/sft_training/plans" && ls ch_*.py | sed 's/^ch_//; s/\.py$//' | tr 'a-z_' 'A-Z-'); do
  step "sft_$chapter" "$PYTHON" -m tools.experiments.sft_training --chapter "$chapter" --run-mode "$MODE" \
    --label "$LABEL" --results-dir "$RESULTS" --model-source "$SOURCE" --device "$DEVICE" --model "$MODEL"
done

"$PYTHON" - "$STEPS_JSON" "$OUT/summary.json" "$LABEL" "$MODE" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
summary = {"schema_version": "device-batch/v1", "label": sys.argv[3], "run_mode": sys.argv[4],
           "steps": steps, "failed_steps": [s["step"] for s in steps if s["exit_code"] != 0]}
open(sys.argv[2], "w", encoding="utf-8").write(json.dumps(summary, indent=2) + "\n")
PY
rm -f "$STEPS_JSON"
if [ -d "$RESULTS" ]; then
  tar -czf "$OUT/records.tar.gz" -C "$RESULTS" .
fi
echo "summary: $OUT/summary.json; records: $OUT/records.tar.gz; log: $LOG"
exit "$FAILED"
