#!/usr/bin/env bash
# On a machine with PyPI access: fetch exactly the wheels the GPU batch carries (environment/gpu-image.toml,
# [carry]: each pinned as in requirements-cpu.txt) for the image's Python and platform, into WHEEL_DIR
# (default `.whl/`, git-ignored; it is emptied first so no older wheel is installed beside the new one).
# Copy that folder to the GPU machine with the tree: run_device_batch.sh installs from it.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEEL_DIR="${WHEEL_DIR:-.whl}"
PYTHON="${PYTHON:-python3}"
listed="$("$PYTHON" - <<'PY'
import re, sys, tomllib
carry = tomllib.load(open("environment/gpu-image.toml", "rb"))["carry"]
pins = dict(re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line).groups()
            for line in open("requirements-cpu.txt", encoding="utf-8") if re.match(r"^[A-Za-z0-9_.\-]+==", line))
for wheel in carry["wheels"]:
    name, version = wheel.split("==")
    if pins.get(name) != version:
        sys.exit(f"environment/gpu-image.toml carries {wheel}, requirements-cpu.txt pins {name}=={pins.get(name)}")
print("--python-version"); print(carry["python_version"])
for platform in carry["platforms"]:
    print("--platform"); print(platform)
for wheel in carry["wheels"]:
    print(wheel)
PY
)"
mapfile -t args <<<"$listed"
rm -rf "$WHEEL_DIR"
mkdir -p "$WHEEL_DIR"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --implementation cp -d "$WHEEL_DIR" "${args[@]}"
du -sh "$WHEEL_DIR"
