"""Tests of the asset registry, the environment profiles and `python -m tools.course preflight`."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import load_catalog
from tools.course.runs.profiles import find_profile, load_profiles
from tools.course.runs.registry import render_registry, write_registry
from tools.core.records import save_json_record_once
from tools.core.reported import load_reported
from tools.errors import ConfigError, UpstreamRecordError

SEED_001_ENTRIES = ["13", "14", "15", "16", "17", "18", "26", "30", "31", "32", "33", "50", "51", "PT-SYNTHETIC-DATA",
                    "PT-KTO", "PT-RLOO", "PT-REWARD-MODEL", "PT-REWARD-SIGNAL", "PT-ROLLOUT-LIFECYCLE", "PT-RL-SYSTEM",
                    "PT-AGENTIC-RL", "DISTILL-OPD", "64", "63", "65", "62", "84", "85", "86", "88", "76", "73", "75"]
COURSE_ADDITIONS = ["PT-DPO-FAMILY", "PT-GRPO-FAMILY"]
"""Chapters the course added beyond the seed's registry (issue 34: the DPO and GRPO families side by side)."""
PROFILES = ["PT-CPU", "PT-SFT-CUDA", "Q-QLORA", "PT-RL-CUDA", "PT-VERL-CUDA", "PT-DISTILL-CUDA"]


def course_copy(tmp_path: Path) -> Path:
    """The files the registry reads, copied into a scratch root."""
    for folder in ("notebooks", "environment", "benchmarks", "tools"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("requirements-cpu.txt", "requirements-verl.txt"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    return tmp_path


def test_catalog_lists_every_seed_entry_with_its_fields():
    chapters = {chapter.id: chapter for chapter in load_catalog(REPO_ROOT)}
    assert sorted(SEED_001_ENTRIES + COURSE_ADDITIONS) == sorted(chapters)
    for chapter in chapters.values():
        assert chapter.title_zh and chapter.title_en and chapter.profiles and chapter.fixed_inputs
        assert chapter.compared_variable and chapter.branch
        assert set(chapter.profiles) <= set(load_profiles(REPO_ROOT)), chapter.id
        assert set(chapter.prerequisites) <= set(chapters), chapter.id
        if chapter.implemented:
            assert (REPO_ROOT / chapter.notebook).is_file()


@pytest.mark.slow
def test_committed_registry_is_current_and_lists_every_entry():
    completed = subprocess.run([sys.executable, "-m", "tools.course", "registry", "--check"], cwd=REPO_ROOT,
                               capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    text = (REPO_ROOT / "benchmarks/results/REGISTRY.md").read_text(encoding="utf-8")
    for chapter in load_catalog(REPO_ROOT):
        assert f"{chapter.id} · {chapter.title_zh}" in text
        if not chapter.implemented:
            assert "planned" in text
    for profile in PROFILES:
        assert f"| {profile}" in text


def test_registry_reads_results_from_records_and_keeps_cpu_smoke_apart(tmp_path):
    root = course_copy(tmp_path)
    before = render_registry(root)
    gpu = {"schema_version": "x/v1", "chapter": "PT-RL-SYSTEM", "run_label": "h200_v1", "run_mode": "real_gpu",
           "evidence_level": "real_gpu", "registry_headline": "checks 7/7 true; update peak 6392 MiB"}
    smoke = dict(gpu, run_label="smoke_v1", run_mode="cpu_smoke", evidence_level="cpu_smoke",
                 registry_headline="code path ok")
    digest = save_json_record_once(root / "benchmarks/results/x/gpu.json", gpu)
    save_json_record_once(root / "benchmarks/results/x/smoke.json", smoke)
    after = render_registry(root)
    assert after != before
    assert write_registry(root, check=True) is True
    mechanism, rest = after.split("## Mechanism experiments")[1].split("## CPU smoke evidence")
    row = next(line for line in mechanism.splitlines() if "PT-RL-SYSTEM ·" in line)
    assert "real_gpu · `h200_v1` · checks 7/7 true; update peak 6392 MiB" in row and digest[:12] in row
    assert "smoke_v1" not in mechanism and "smoke_v1" in rest


def test_unreadable_record_is_an_error(tmp_path):
    root = course_copy(tmp_path)
    (root / "benchmarks/results/bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="bad.json"):
        render_registry(root)


def test_reported_figures_stand_apart_and_meet_our_records_only_as_a_ratio(tmp_path):
    figures = load_reported(REPO_ROOT)
    shared = [f for f in figures if "PT-RL-SYSTEM" in f.chapters]
    assert {f.quantity for f in shared} >= {"update_phase_sampled_peak_mib.release", "update_phase_seconds.retain",
                                             "whole_segment_sampled_peak_mib.retain", "admitted_rejected_per_group"}
    assert all(f.hardware.startswith("NVIDIA RTX 5070 Ti") and f.source_row for f in figures)
    root = course_copy(tmp_path)
    row = lambda text: next(line for line in text.split("## Mechanism experiments")[1].splitlines()  # noqa: E731
                            if "PT-RL-SYSTEM ·" in line)
    before = row(render_registry(root))
    assert "update_phase_sampled_peak_mib.release 6392 MiB (`rtx5070ti_verl_mechanism_closure_v2`)" in before
    assert "ours ÷ reported" not in before and "no real_gpu record yet" in before
    save_json_record_once(root / "benchmarks/results/x/gpu.json", {
        "schema_version": "x/v1", "chapters": ["PT-ROLLOUT-LIFECYCLE", "PT-RL-SYSTEM"], "run_label": "h200_v1",
        "run_mode": "real_gpu", "evidence_level": "real_gpu",
        "comparable": {"update_phase_sampled_peak_mib.release": 3196.0}})
    assert "ours ÷ reported = 0.50 (`h200_v1`)" in row(render_registry(root))
    bad = (root / "benchmarks/reported/original_course.toml")
    bad.write_text(bad.read_text(encoding="utf-8").replace("course-reported-figures/v1", "v0"), encoding="utf-8")
    with pytest.raises(ConfigError, match="schema_version"):
        load_reported(root)


def test_profiles_cover_the_seed_and_their_state_comes_from_records(tmp_path):
    profiles = load_profiles(REPO_ROOT)
    assert set(PROFILES) <= set(profiles)
    assert find_profile("BASE-CPU", REPO_ROOT).name == "PT-CPU"
    assert profiles["MULTI-WORKER"].min_gpus >= 2
    assert "verified" not in (REPO_ROOT / "environment/profiles.toml").read_text(encoding="utf-8").replace(
        "(not yet verified)", "")  # typed states are gone: the registry derives them
    root = course_copy(tmp_path)
    state = lambda name: next(line for line in render_registry(root).split("## Mechanism")[0].splitlines()  # noqa: E731
                              if line.startswith(f"| {name}"))
    assert "not yet verified here (no real_gpu record)" in state("PT-VERL-CUDA")
    assert "original course reported" in state("PT-VERL-CUDA")
    save_json_record_once(root / "benchmarks/results/x/gpu.json", {
        "schema_version": "x/v1", "chapter": "PT-RL-SYSTEM", "run_label": "h200_v1", "run_mode": "real_gpu",
        "evidence_level": "real_gpu"})
    assert "verified by real_gpu record(s) `h200_v1`" in state("PT-VERL-CUDA")
    assert "not yet verified" in state("PT-SFT-CUDA")
    for profile in profiles.values():
        assert profile.requires_cuda == (profile.name != "PT-CPU")
        assert (REPO_ROOT / profile.requirements).is_file()
    with pytest.raises(ConfigError, match="unknown profile"):
        find_profile("PT-NOPE", REPO_ROOT)


def run_preflight(profile, cache):
    env = {**os.environ, "COURSE_MODEL_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "tools.course", "preflight", "--profile", profile],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env)


def test_cpu_profile_is_ready_here(tmp_path):
    completed = run_preflight("PT-CPU", tmp_path)
    assert completed.returncode == 0, completed.stdout
    assert "READY" in completed.stdout


@pytest.mark.slow
@pytest.mark.parametrize("profile", [p for p in PROFILES if p != "PT-CPU"] + ["MULTI-WORKER"])
def test_cuda_profiles_are_blocked_here_with_the_reason_and_fix(profile, tmp_path):
    completed = run_preflight(profile, tmp_path)
    assert completed.returncode == 3, completed.stdout
    assert "BLOCKED" in completed.stdout and "cuda:" in completed.stdout
    assert "next actions:" in completed.stdout and "hf download" in completed.stdout


def test_requirements_verl_matches_verl_091_vllm_extra():
    from tools.core.environment import read_pins

    pins = read_pins(REPO_ROOT / "requirements-verl.txt")
    assert pins["verl"] == "0.9.1" and pins["vllm"] == "0.24.0"
    assert pins["torch"] == "2.11.0" and pins["transformers"] == "5.9.0"
    cpu = read_pins(REPO_ROOT / "requirements-cpu.txt")
    version = tuple(int(part) for part in cpu["transformers"].split("."))
    assert (5, 5, 3) <= version < (5, 11, 0) and version != (5, 6, 0)
    assert cpu["torch"] == "2.13.0"


def test_a_chapter_shows_reported_figures_labelled_and_says_when_there_are_none():
    from tools.chapters.evidence import HEADER, reported_block

    block = reported_block("PT-RL-SYSTEM", REPO_ROOT)
    assert block.startswith(HEADER) and "RTX 5070 Ti" in block and "6392 MiB" in block
    assert "shared verl record table" in block and 'RUN_MODE = "cpu_smoke"' in block
    assert "published no figure" in reported_block("76", REPO_ROOT)


def test_the_readme_chapter_table_is_generated_from_the_catalog_and_checked(tmp_path):
    from tools.course.runs.readme import render_chapter_table, write_chapter_table

    root = course_copy(tmp_path)
    shutil.copy(REPO_ROOT / "README.md", root / "README.md")
    assert write_chapter_table(root, check=True) is False
    table = render_chapter_table(root)
    implemented = [chapter for chapter in load_catalog(root) if chapter.implemented]
    assert len(table.splitlines()) == 2 + len(implemented)
    catalog = root / "notebooks/catalog.toml"
    catalog.write_text(catalog.read_text(encoding="utf-8").replace('gpu_stage = "tiny-model loss check"',
                                                                   'gpu_stage = "a new stage"'), encoding="utf-8")
    assert write_chapter_table(root, check=True) is True
    assert write_chapter_table(root) is True and "a new stage" in (root / "README.md").read_text(encoding="utf-8")


def test_every_reported_figure_carries_its_own_model():
    """Chapter 26 shows project 65's figures: the 1.5B capacity run must not print under a 0.5B header."""
    from tools.chapters.evidence import reported_block
    from tools.core.reported import reported_for

    by_quantity = {figure.quantity: figure for figure in reported_for("65", REPO_ROOT)}
    assert by_quantity["qlora_0_5b"].model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert "1.5B" in by_quantity["qlora_1_5b_capacity"].model
    block = reported_block("65", REPO_ROOT)
    header, lines = block.splitlines()[0], block.splitlines()[1:]
    assert "0.5B" not in header, header
    capacity = next(line for line in lines if line.strip().startswith("qlora_1_5b_capacity"))
    assert "1.5B" in capacity and "0.5B" not in capacity, capacity
    single = reported_block("14", REPO_ROOT)  # one model for every figure: named once, in the header
    assert "Qwen/Qwen2.5-0.5B-Instruct" in single.splitlines()[0]
