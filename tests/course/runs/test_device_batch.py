"""The GPU batch rehearsed against the GPU image's packages, not the development venv.

`benchmarks/gpu/rehearsal_venv.py` builds (once, cached under build/gpu-image/<key>/) a venv from
environment/gpu-image.toml: the image's transformers, tokenizers, accelerate, ... at the image's
versions, torch's CPU build, and nothing the batch carries. `fetch_wheels.sh` fetches exactly the
carried wheels, and `run_device_batch.sh` installs them the way it does on the GPU machine. Every
registered step then runs there (cpu_smoke, tiny model); an ImportError, a version conflict or a
missing package fails the batch's environment check, which stops it. The real_gpu check runs with
CUDA faked where it must be: a CUDA build reported by torch, with and without an NVML device.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import tomllib
from chapter_factory import REPO_ROOT

from tools.experiments.registry import device_steps

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "run_device_batch.sh"
FETCH = REPO_ROOT / "benchmarks" / "gpu" / "fetch_wheels.sh"
DESCRIPTION = tomllib.loads((REPO_ROOT / "environment" / "gpu-image.toml").read_text(encoding="utf-8"))
FAKE_GPU = Path(__file__).resolve().parent / "fake_gpu"
LABEL = "pytest_device"


def _rehearsal_module():
    spec = importlib.util.spec_from_file_location("rehearsal_venv",
                                                  REPO_ROOT / "benchmarks" / "gpu" / "rehearsal_venv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def image_python() -> Path:
    """The rehearsal venv's interpreter (built on first use: about 3 minutes cold, cached afterwards)."""
    return _rehearsal_module().build()


@pytest.fixture(scope="module")
def carried_wheels(image_python) -> Path:
    """Exactly what fetch_wheels.sh fetches, cached beside the rehearsal venv."""
    folder = image_python.parents[2] / "wheels"
    if not (folder / ".complete").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["bash", str(FETCH)], env={**os.environ, "WHEEL_DIR": str(folder)}, check=True,
                       capture_output=True, text=True, timeout=900)
        (folder / ".complete").write_text("fetched by fetch_wheels.sh\n", encoding="utf-8")
    return folder


def _batch(image_python, wheels, out, tmp, *args, extra_env=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": str(image_python), "WHEEL_DIR": str(wheels), "SITE_DIR": str(tmp / "site"),
           "COURSE_MODEL_CACHE": str(tmp / "models"), **(extra_env or {})}
    env.pop("PYTHONPATH", None)
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run(["bash", str(SCRIPT), "--label", LABEL, "--out", str(out), *args], capture_output=True,
                          text=True, env=env, timeout=3600, cwd="/", check=False)


@pytest.fixture(scope="module")
def rehearsal(image_python, carried_wheels, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("device")
    out = tmp / "out"
    # a generous budget and step cap: the CPU under test is shared; the real budget is tested with the toy
    completed = _batch(image_python, carried_wheels, out, tmp, "--rehearse", "--budget-s", "3000",
                       "--max-step-s", "900")
    return completed, out


def test_every_registered_step_passes_on_the_image_packages(rehearsal):
    completed, out = rehearsal
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert completed.returncode == 0, (out / "log.txt").read_text(encoding="utf-8")[-4000:]
    assert [entry["step"] for entry in summary["steps"]] == ["environment", "models",
                                                             *[step.name for step in device_steps()]]
    assert summary["failed_steps"] == [] and summary["run_mode"] == "cpu_smoke" and summary["complete"] is True
    assert len([step for step in device_steps() if step.experiment == "sft_training"]) >= 5


def test_the_batch_runs_on_the_images_transformers_and_carries_peft_and_bitsandbytes(rehearsal):
    _, out = rehearsal
    environment = json.loads((out / "summary.json").read_text(encoding="utf-8"))["environment"]
    packages = environment["packages"]
    for name in ("transformers", "tokenizers", "accelerate", "safetensors", "huggingface_hub"):
        assert packages[name] == {"version": DESCRIPTION["image"]["packages"][name], "origin": "image"}, name
    for wheel in DESCRIPTION["carry"]["wheels"]:
        name, version = wheel.split("==")
        assert packages[name] == {"version": version, "origin": "carried"}, name
    assert environment["status"] == "ready", environment["reasons"]
    checks = {check["name"]: check for check in environment["checks"]}
    assert checks["version_conflicts"]["ok"] and checks["hf_hub_offline"]["ok"]
    assert {f"runner:{step.experiment}" for step in device_steps()} <= set(checks)


def test_the_records_come_back_in_one_archive_and_say_which_versions_ran(rehearsal):
    _, out = rehearsal
    with tarfile.open(out / "records.tar.gz") as archive:
        # records lie at <folder>/<record>.json; deeper JSON files are delivered artefacts (62's adapter config)
        names = [name for name in archive.getnames() if name.endswith(".json") and len(Path(name).parts) == 2]
        records = {name: json.load(archive.extractfile(name)) for name in names}
    folders = {Path(name).parts[0] for name in names}
    assert {"pt_verl_closure", "73-training-performance", "76-activation-memory-strategies", "26-qlora"} <= folders
    for name, record in records.items():
        assert record.get("evidence_level") == "cpu_smoke" and record.get("run_label") == LABEL, name
        runtime = record.get("runtime") or record.get("environment")
        if runtime is not None:
            assert runtime["transformers"] == DESCRIPTION["image"]["packages"]["transformers"], name
            assert runtime["peft"] == "0.21.2", name
    nf4 = next(record for name, record in records.items() if name.endswith(f"sft_nf4_base_{LABEL}.json"))
    assert nf4["status"] == "ok"  # bitsandbytes was carried


def _environment(image_python, carried_wheels, tmp_path, *fakes: str) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    subprocess.run([str(image_python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    *map(str, sorted(carried_wheels.glob("*.whl")))], check=True, timeout=600)
    path = [str(FAKE_GPU / fake) for fake in fakes] + [str(site), str(REPO_ROOT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "COURSE_CARRIED_SITE": str(site), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(image_python), "-m", "tools.experiments", "environment", "--run-mode", "real_gpu",
                           "--model-source", "random_init"], capture_output=True, text=True, env=env, timeout=900,
                          cwd="/", check=False)


def test_the_real_gpu_check_passes_on_a_faked_cuda_device_seen_by_nvml(image_python, carried_wheels, tmp_path):
    completed = _environment(image_python, carried_wheels, tmp_path, "cuda_build", "nvml")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "CUDA device NVIDIA H200 (fake NVML)" in completed.stdout and "140.4 GiB" in completed.stdout


def test_the_real_gpu_check_blocks_without_nvml(image_python, carried_wheels, tmp_path):
    completed = _environment(image_python, carried_wheels, tmp_path, "cuda_build")
    assert completed.returncode == 3, completed.stdout + completed.stderr
    assert "!! cuda: no NVIDIA device visible to NVML" in completed.stdout
    assert "!! import:" not in completed.stdout and "!! runner:" not in completed.stdout


def test_carrying_a_transformers_the_images_tokenizers_cannot_serve_stops_the_batch(image_python, carried_wheels,
                                                                                      tmp_path):
    """The measured defect: transformers 5.9.0 carried beside the image's tokenizers 0.23.2. The
    environment check blocks and the batch stops before spending any step on it."""
    wheels = tmp_path / "wheels"
    shutil.copytree(carried_wheels, wheels)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(wheels), "transformers==5.9.0"], check=True, timeout=900, capture_output=True)
    out = tmp_path / "out"
    completed = _batch(image_python, wheels, out, tmp_path, "--rehearse", "--step", "environment", "--step",
                       "baseline_73")
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert completed.returncode == 1
    steps = {entry["step"]: entry for entry in summary["steps"]}
    assert steps["environment"]["exit_code"] == 3 and steps["baseline_73"]["status"] == "skipped"
    assert "environment failed" in steps["baseline_73"]["reason"]
    reasons = " ".join(summary["environment"]["reasons"])
    assert "tokenizers" in reasons and summary["environment"]["packages"]["transformers"]["origin"] == "carried"


def _wheel_fits_the_image(name: str) -> bool:
    python, abi, platform = name[:-4].split("-")[-3:]
    return (python in ("py3", "py2.py3") or python.startswith("cp3") and abi == "abi3" and int(python[3:]) <= 12
            or python == "cp312") and (platform == "any" or re.match(r"manylinux_?\d*_?\d*_x86_64|manylinux2014_x86_64",
                                                                       platform) is not None)


def test_the_carried_set_plus_the_tree_fits_in_the_carry_budget(carried_wheels):
    wheels = sorted(carried_wheels.glob("*.whl"))
    assert sorted("==".join(w.name.split("-")[:2]) for w in wheels) == sorted(DESCRIPTION["carry"]["wheels"])
    assert all(_wheel_fits_the_image(w.name) for w in wheels), [w.name for w in wheels]
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    tree = sum((REPO_ROOT / name).stat().st_size for name in listed if name and (REPO_ROOT / name).is_file())
    carried = sum(w.stat().st_size for w in wheels)
    limit = DESCRIPTION["image"]["carry_limit_mib"] * 2**20
    assert carried + tree < limit, f"carried {carried / 2**20:.1f} MiB + tree {tree / 2**20:.1f} MiB"


def test_fetch_wheels_clears_its_folder_first(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "transformers-5.9.0-py3-none-any.whl").write_bytes(b"an older wheel")
    subprocess.run(["bash", str(FETCH)], env={**os.environ, "WHEEL_DIR": str(folder)}, check=True,
                   capture_output=True, text=True, timeout=900)
    assert sorted("==".join(w.name.split("-")[:2]) for w in folder.glob("*.whl")) == sorted(
        DESCRIPTION["carry"]["wheels"])


def test_bad_arguments_stop_the_script_before_any_step(tmp_path):
    completed = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                               check=False)
    assert completed.returncode == 2 and "usage" in completed.stderr
    assert not (tmp_path / "summary.json").exists()


def _python_312() -> str | None:
    """An interpreter of the image's Python version (3.12), where this machine has one."""
    candidates = [os.environ.get("COURSE_PYTHON312"), shutil.which("python3.12")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False).stdout.strip()
        candidates += sorted(str(p) for p in Path(root).glob("versions/3.12*/bin/python3.12")) if root else []
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                               capture_output=True, text=True, check=False)
        if probe.stdout.strip() == "True":
            return candidate
    return None


def test_the_course_code_compiles_and_the_carried_wheels_install_on_the_images_python(carried_wheels, tmp_path):
    """The rehearsal runs on 3.11 (no CPU torch for 3.12 here); what 3.12 itself can check is checked here."""
    python = _python_312()
    if python is None:
        pytest.skip("no Python 3.12 interpreter on this machine (set COURSE_PYTHON312 to one)")
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}
    compiled = subprocess.run([python, "-m", "compileall", "-q", "tools", "benchmarks"], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                                str(tmp_path / "site"), *map(str, sorted(carried_wheels.glob("*.whl")))],
                               capture_output=True, text=True, check=False, timeout=600)
    assert installed.returncode == 0, installed.stderr
    assert {p.name.split("-")[0] for p in (tmp_path / "site").glob("*.dist-info")} == {
        wheel.split("==")[0] for wheel in DESCRIPTION["carry"]["wheels"]}
