#!/usr/bin/env bash
# The one command a lent GPU machine runs (see environment/gpu-image.toml: one H200, no network, the
# image's torch / transformers / tokenizers / accelerate; no verl, vLLM, ray, papermill, nbgrader):
# every device step of the experiment registry (`python -m tools.experiments steps`), each in its own
# process, under one time budget, with `random_init` weights (recorded as such).
#
#   bash benchmarks/gpu/run_device_batch.sh --label L --out DIR [--budget-s 480]   # real_gpu on CUDA
#   bash benchmarks/gpu/run_device_batch.sh --label L --out DIR --rehearse        # the same steps, cpu_smoke
#
# The carried wheels (peft, bitsandbytes: benchmarks/gpu/fetch_wheels.sh puts them in `.whl/`, which must
# be copied to the GPU machine beside the tree) are installed into SITE_DIR first, ahead of the image's
# packages. DIR receives summary.json and records.tar.gz (both rewritten after every step, so a batch cut
# short still brings back every finished record), environment.json and log.txt. Exit 0 when every step
# passed, 1 when one failed, timed out or was skipped, 2 on invalid arguments, 3 when the wheels would
# not install. Other flags: --max-step-s S, --model-source local|random_init, --step NAME (repeatable).
set -uo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
WHEEL_DIR="${WHEEL_DIR:-$REPO/.whl}"
SITE_DIR="${SITE_DIR:-/tmp/course-carried-site}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export COURSE_MODEL_CACHE="${COURSE_MODEL_CACHE:-/tmp/course-model-cache}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

case " $* " in
  *" --label "*) ;;
  *) echo "usage: $0 --label LABEL --out DIR [--rehearse] [--budget-s S] [--max-step-s S] [--step NAME]" >&2; exit 2 ;;
esac

if ls "$WHEEL_DIR"/*.whl >/dev/null 2>&1; then
  rm -rf "$SITE_DIR"
  if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE_DIR" \
      "$WHEEL_DIR"/*.whl; then
    echo "the carried wheels in $WHEEL_DIR would not install into $SITE_DIR" >&2
    exit 3
  fi
  export PYTHONPATH="$SITE_DIR:$PYTHONPATH" COURSE_CARRIED_SITE="$SITE_DIR"
fi

exec "$PYTHON" -m tools.experiments batch "$@"
