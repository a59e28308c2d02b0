#!/usr/bin/env bash
# Download, on a machine with PyPI access, the pinned wheels a lent GPU machine lacks, into `.whl/`
# (git-ignored) for run_device_batch.sh to install. The GPU machine's Python is 3.12 on x86-64 and
# everything must fit in 64 MiB with the working tree: transformers and peft by default,
# bitsandbytes (43 MB) only with --with-bitsandbytes (chapter 26's real 4-bit path).
set -euo pipefail
cd "$(dirname "$0")/../.."
pin() { grep -E "^$1==" requirements-cpu.txt | head -n 1; }
wanted=("$(pin transformers)" "$(pin peft)")
[ "${1:-}" = "--with-bitsandbytes" ] && wanted+=("$(pin bitsandbytes)")
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl "${wanted[@]}"
du -sh .whl
