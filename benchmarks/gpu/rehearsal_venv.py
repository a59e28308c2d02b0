"""Build (once, cached) the CPU venv that stands in for the GPU image in CI, from environment/gpu-image.toml.

    python3 benchmarks/gpu/rehearsal_venv.py            # build if needed; print the venv's python
    python3 benchmarks/gpu/rehearsal_venv.py --check    # exit 1 when the cached venv is missing or stale

The venv holds the image's packages at the image's versions (torch's CPU build and the substitutes
the description records where the exact build cannot be had here) and NOT what the batch carries:
`run_device_batch.sh` installs the carried wheels itself, the way it does on the GPU machine. The
cache lives in `build/gpu-image/<key>/` where the key is the sha256 of the description and the
interpreter; `.complete` holds the installed versions and the build's seconds. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
DESCRIPTION = REPO / "environment" / "gpu-image.toml"
CACHE = REPO / "build" / "gpu-image"
MARKER = ".complete"


def load_description(path: Path = DESCRIPTION) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def course_pins(requirements: Path = REPO / "requirements-cpu.txt") -> dict[str, str]:
    pins = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def rehearsal_requirements(description: dict, pins: dict[str, str]) -> list[str]:
    """`name==version` of every image package, as the rehearsal installs it (see the description)."""
    substitutes = description["rehearsal"].get("substitutes", {})
    unrecorded = description["rehearsal"].get("unrecorded", {})
    requirements = []
    for name, version in description["image"]["packages"].items():
        if name in substitutes:
            version = substitutes[name]
        elif version == "unrecorded":
            version = pins.get(name.lower()) or unrecorded.get(name)
            if version is None:
                raise SystemExit(f"{DESCRIPTION.name}: {name} is unrecorded and has no pin; "
                                 "add it to [rehearsal].unrecorded")
        if name in carried_names(description):
            continue  # carried by the batch, installed by run_device_batch.sh
        requirements.append(f"{name}=={version}")
    return requirements


def carried_names(description: dict) -> set[str]:
    return {wheel.split("==")[0].lower() for wheel in description["carry"]["wheels"]}


def interpreter(description: dict) -> str:
    """The interpreter of the rehearsal's Python version (this one when it matches)."""
    wanted = description["rehearsal"]["python"]
    if f"{sys.version_info.major}.{sys.version_info.minor}" == wanted:
        return sys.executable
    found = shutil.which(f"python{wanted}")
    if found is None:
        raise SystemExit(f"the rehearsal needs python{wanted} (environment/gpu-image.toml [rehearsal].python)")
    return found


def cache_key(description_text: str, python: str) -> str:
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout.strip()
    return hashlib.sha256(f"{description_text}\n{version}".encode()).hexdigest()[:16]


def venv_folder(description_path: Path = DESCRIPTION) -> Path:
    description = load_description(description_path)
    return CACHE / cache_key(description_path.read_text(encoding="utf-8"), interpreter(description))


def build(description_path: Path = DESCRIPTION, *, quiet: bool = True) -> Path:
    """The rehearsal venv's python, building the venv first when its cache entry is missing."""
    description = load_description(description_path)
    python = interpreter(description)
    folder = CACHE / cache_key(description_path.read_text(encoding="utf-8"), python)
    venv_python = folder / "venv" / "bin" / "python"
    if (folder / MARKER).is_file() and venv_python.is_file():
        return venv_python
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    started = time.monotonic()
    subprocess.run([python, "-m", "venv", str(folder / "venv")], check=True)
    requirements = rehearsal_requirements(description, course_pins())
    quiet_flag = ["--quiet"] if quiet else []
    subprocess.run([str(venv_python), "-m", "pip", "install", *quiet_flag, "--disable-pip-version-check",
                    *requirements], check=True)
    frozen = subprocess.run([str(venv_python), "-m", "pip", "freeze"], capture_output=True, text=True,
                            check=True).stdout.split()
    (folder / MARKER).write_text(json.dumps({"requirements": requirements, "installed": frozen,
                                             "build_seconds": round(time.monotonic() - started, 1)}, indent=2),
                                 encoding="utf-8")
    return venv_python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the cached venv is there")
    args = parser.parse_args(argv)
    if args.check:
        folder = venv_folder()
        ready = (folder / MARKER).is_file()
        print(f"{folder}: {'ready' if ready else 'missing (run without --check to build it)'}")
        return 0 if ready else 1
    print(build(quiet=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
