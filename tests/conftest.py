"""Fixtures shared by several test files.

`course_smoke_run` executes every implemented chapter once in cpu_smoke through the batch runner
`make run` uses (`run_chapters`: prerequisites first, one label, one results folder, each project
promised the sha256 of the manifests it reads; the lifecycle page writes the shared verl record that
the system page then reads). The chapter, shared-verl, chapter-76 and project-chain tests read that
one run instead of executing the same notebooks again; they carry the xdist group `course_run`, so
under `pytest -n 2 --dist loadgroup` the run happens once, on one worker.

The tiny offline model, built once per session in a cache of its own (the user's model cache is never
written): `tiny_model_dir` (its folder), `tiny_tokenizer` (its Hugging Face tokenizer), `tiny_model`
(the model, float32 on CPU, eval mode; shared and read-only: the session fails if a test changed it)
and `fresh_tiny_model` (a private copy a test may train or edit).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import implemented_chapters
from tools.course.layout import CourseLayout
from tools.course.runs.runner import ChapterRun, run_chapters

COURSE_LABEL = "pytest_course"


@dataclass
class CourseRun:
    label: str
    results: Path
    outcomes: dict[str, ChapterRun]
    handoffs: dict[str, dict]
    """Per project, the manifest the runner promised downstream: `path` (relative to `results`), `sha256`."""


@pytest.fixture(scope="session")
def course_smoke_run(tmp_path_factory) -> CourseRun:
    results = tmp_path_factory.mktemp("course_run") / "results"
    label, outcomes = run_chapters(REPO_ROOT, implemented_chapters(REPO_ROOT), run_mode="cpu_smoke",
                                   label=COURSE_LABEL, results_dir=str(results), show_progress=False)
    summary = json.loads((CourseLayout(REPO_ROOT).run_dir(label) / "summary.json").read_text(encoding="utf-8"))
    return CourseRun(label, results, {outcome.chapter: outcome for outcome in outcomes}, summary["handoffs"])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, keep the tests that share a module-scoped fixture on one worker, so
    the fixture is built once; every other test is distributed on its own."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        fixtures = getattr(item, "_fixtureinfo", None)
        scopes = {definition.scope for definitions in (fixtures.name2fixturedefs.values() if fixtures else ())
                  for definition in definitions}
        if "module" in scopes:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture(scope="module")
def one_cpu_thread():
    """The tiny model's matrices are too small for several threads; on a busy machine they only wait."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny model's folder (config, weights, tokenizer, identity file), built once per session."""
    from tools.models.loading import resolve_model

    return resolve_model("tiny", cache_dir=tmp_path_factory.mktemp("model_cache"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    """The tiny model's tokenizer, shared by the session: use it, never reconfigure it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def model_fingerprint(model) -> str:
    """sha256 of everything a test could change in a model: parameters, buffers, requires_grad, the
    train/eval mode of every module, the config and the generation config."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}:{tensor.requires_grad}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
    digest.update("".join("1" if module.training else "0" for module in model.modules()).encode())
    digest.update(model.config.to_json_string().encode())
    digest.update(model.generation_config.to_json_string().encode())
    return digest.hexdigest()


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """The tiny model (float32, CPU, eval mode), shared by the session. Read it, never change it: a test
    that trains or edits a model takes `fresh_tiny_model` (or `copy.deepcopy(tiny_model)`)."""
    from tools.models.loading import load_causal_lm

    model, _ = load_causal_lm(tiny_model_dir)
    before = model_fingerprint(model)
    yield model
    assert model_fingerprint(model) == before, \
        "a test changed the shared tiny_model; use fresh_tiny_model (a private copy) for a test that changes it"


@pytest.fixture
def fresh_tiny_model(tiny_model):
    """A private copy of the tiny model for one test, which may train or edit it."""
    return copy.deepcopy(tiny_model)


@pytest.fixture(scope="session")
def lab_models() -> dict[str, Path]:
    """`{"lab": folder, "lab-teacher": folder}`: the lab models, built once (about 1-2 minutes each on one
    core) and cached under build/lab_models by recipe hash, so a later session only checks them. Load one
    with `tools.models.loading.load_causal_lm(folder)` (a fresh copy per test that trains it)."""
    from tools.models.lab import build_lab_models

    return build_lab_models()
