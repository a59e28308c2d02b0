"""Environment profiles (`environment/profiles.toml`) and their preflight.

A preflight only checks: installed packages against the profile's pins, CUDA and GPU memory,
the local model cache. It never installs and never loads a model.
"""

from __future__ import annotations

import importlib.util
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tools.errors import ConfigError
from tools.core.paths import resolve_project_root
from tools.core.preflight import preflight_report
from tools.course.runs.result_records import profile_gpu_records

PROFILES_PATH = Path("environment/profiles.toml")


@dataclass(frozen=True)
class Profile:
    """One environment profile."""

    name: str
    title: str
    requirements: str
    requires_cuda: bool
    min_gpu_memory_gib: float
    models: tuple[str, ...]
    scope: str
    aliases: tuple[str, ...] = ()
    min_gpus: int = 1

    def install_command(self) -> str:
        return f"python -m pip install -r {self.requirements}"


def load_profiles(root: Path | None = None) -> dict[str, Profile]:
    """Every profile by name (aliases resolve through `find_profile`)."""
    root = root or resolve_project_root()
    data = tomllib.loads((root / PROFILES_PATH).read_text(encoding="utf-8"))
    profiles = {}
    for name, entry in data.get("profile", {}).items():
        try:
            profiles[name] = Profile(
                name=name, title=entry["title"], requirements=entry["requirements"],
                requires_cuda=bool(entry["requires_cuda"]), min_gpu_memory_gib=float(entry["min_gpu_memory_gib"]),
                models=tuple(entry.get("models", ())), scope=entry["scope"],
                aliases=tuple(entry.get("aliases", ())), min_gpus=int(entry.get("min_gpus", 1)),
            )
        except KeyError as missing:
            raise ConfigError(f"{PROFILES_PATH}: profile {name} lacks {missing}") from None
        if not (root / profiles[name].requirements).is_file():
            raise ConfigError(f"{PROFILES_PATH}: profile {name} names missing file {profiles[name].requirements}")
    return profiles


def find_profile(name: str, root: Path | None = None) -> Profile:
    """The profile called `name` or having it as an alias (case-insensitive)."""
    profiles = load_profiles(root)
    for profile in profiles.values():
        if name.upper() in (profile.name.upper(), *(alias.upper() for alias in profile.aliases)):
            return profile
    raise ConfigError(f"unknown profile {name!r}; known: {', '.join(profiles)}")


def _gpu_count_check(profile: Profile) -> list[dict]:
    if profile.min_gpus <= 1:
        return []
    count = 0
    if importlib.util.find_spec("torch") is not None:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ok = count >= profile.min_gpus
    return [{"name": "gpu_count", "ok": ok, "severity": "blocked",
             "detail": f"{count} CUDA device(s), need {profile.min_gpus}",
             "fix": None if ok else f"use a machine or cluster with at least {profile.min_gpus} GPUs"}]


def _unverified_check(profile: Profile, root: Path) -> list[dict]:
    """A warning while no committed real_gpu record shows a course run in this profile."""
    if not profile.requires_cuda or profile_gpu_records(root, profile.name):
        return []
    return [{"name": "profile_verified", "ok": False, "severity": "warning",
             "detail": "no real_gpu record of this profile's chapters is committed yet: no course run has verified it",
             "fix": "treat results as the first run; record them under a new label and commit the records"}]


def profile_preflight(profile: Profile, root: Path | None = None, cache_dir: Path | None = None) -> dict:
    """The preflight report of `profile` on this machine."""
    from tools.models.cache import model_cache_check

    root = root or resolve_project_root()
    model_checks = [model_cache_check(model_id, cache_dir) for model_id in profile.models]
    report = preflight_report(
        requirements_file=root / profile.requirements,
        require_cuda=profile.requires_cuda,
        min_gpu_memory_gib=profile.min_gpu_memory_gib if profile.requires_cuda else None,
        extra_checks=model_checks + _gpu_count_check(profile) + _unverified_check(profile, root),
    )
    for check in report["checks"]:
        if check["name"].startswith("package:") and not check["ok"]:
            check["fix"] = f"{profile.install_command()}  (in the {profile.name} environment)"
    report["next_actions"] = list(dict.fromkeys(c["fix"] for c in report["checks"] if not c["ok"] and c["fix"]))
    report["profile"] = profile.name
    return report
