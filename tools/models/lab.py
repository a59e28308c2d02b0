"""The lab models: tiny Qwen2 models pretrained in code on the lab task, so training chapters start
from a model that already knows something and still has room to learn.

- `lab`: the student. Pretraining stops as soon as its exact-match on the validation split reaches
  `target_validation` (55 %), so it sits in the middle of learning two-digit addition: held-out
  exact-match between 40 % and 80 %, and fine-tuning, preference or RL stages can show gains.
- `lab-teacher`: wider, with more heads; trained until the validation exact-match reaches 90 %, then
  150 steps of learning-rate decay: held-out exact-match >= 90 %.

Both use the tiny model's tokenizer and chat template (`tools.models.builders.build_tiny_tokenizer`),
so a chat is rendered exactly as for a Qwen2 model; the vocabulary has exactly `len(tokenizer)` rows.
Input and output embeddings are untied: with tied embeddings the digit embeddings serve both roles
and two of three seeds stalled near 10 % exact-match within the budget; untied, every seed learned.
Pretraining (`pretrain`): AdamW, warm-up, a constant learning rate until the validation target,
then the decay; loss on the reply and its end-of-turn token only, one CPU thread, a fixed seed, the
problems of the `train` split only (held-out and validation problems differ by content hash).

Where the weights come from (`COURSE_LAB_MODELS`):

- `committed` (the default): the weights committed in `tools/models/lab_weights/<name>/`, built once
  by `python -m tools.models lab-commit` under the pinned CPU numerics profile. Every learner, on
  every processor, starts from these same weights, so a chapter's run starts from the model the
  page's figures came from. Loading checks the folder against the current recipe and its file hashes.
- `build`: pretrain here, under whatever numerics profile is in force, into
  `build/lab_models/<name>-<hash of recipe and numerics profile>/` (temporary folder, atomic rename).
  The builder stays the source of truth: the suite rebuilds the models and checks that they land in
  the same quality band (not the same bits), and runs the effect tests on models built under a second
  numerics profile, so an effect that holds only on the committed bits is caught.

A folder carries the `course_model.json` identity file of the tiny model (recipe, seed, file hashes,
fingerprint) plus the pretraining history and the held-out exact-match measured at build time.
"""

from __future__ import annotations

import math
import os
import random
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tools.core.numerics import cpu_numerics
from tools.core.paths import resolve_project_root
from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.models.architectures import CHAT_TEMPLATE, LAB_MODEL_IDS, SPECIAL_TOKENS
from tools.models.lab_chat import as_messages, chat_ids, prompt_ids  # noqa: F401 (re-exported)
from tools.models.builders import (
    _build_once,
    _canonical_sha256,
    _init_model,
    _save_tokenizer,
    _tiny_recipe,
    _write_identity,
    build_tiny_tokenizer,
)

LAB_BUILDER_VERSION = 1
"""Bump when the pretraining code changes in a way the recipe does not show; old folders are refused."""

LAB_FOLDER = "lab_models"

COMMITTED_LAB_DIR = Path(__file__).resolve().parent / "lab_weights"
"""The committed lab weights, one folder per named recipe."""

LAB_SOURCE_ENV = "COURSE_LAB_MODELS"
LAB_SOURCES = ("committed", "build")

IGNORE_INDEX = -100


@dataclass(frozen=True)
class LabRecipe:
    """Everything that decides a lab model's weights (its hash names the cache folder)."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    seed: int = 20241201
    task: str = lab_tasks.PRETRAINING_TASK
    max_steps: int = 1500
    batch_size: int = 64
    learning_rate: float = 3e-3
    warmup_steps: int = 40
    weight_decay: float = 0.01
    target_validation: float = 0.9
    decay_steps: int = 0
    check_every: int = 10
    validation_problems: int = 256
    extra: dict = field(default_factory=dict)

    def architecture(self) -> dict:
        return {"hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                "num_hidden_layers": self.num_hidden_layers, "num_attention_heads": self.num_attention_heads,
                "num_key_value_heads": self.num_key_value_heads, "max_position_embeddings": 2048,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "rms_norm_eps": 1e-6,
                "tie_word_embeddings": False, "hidden_act": "silu", "initializer_range": 0.02,
                "attention_dropout": 0.0, "use_sliding_window": False}


LAB_RECIPES: dict[str, LabRecipe] = {
    # The student's validation is checked every step: learning the carry is steep, and a coarser check let
    # the stopping point (and the held-out quality) swing with the last bits of the arithmetic.
    "lab": LabRecipe("lab", hidden_size=64, intermediate_size=192, target_validation=0.55, decay_steps=0,
                     check_every=1),
    "lab-teacher": LabRecipe("lab-teacher", hidden_size=96, intermediate_size=256, num_attention_heads=8,
                             num_key_value_heads=4, target_validation=0.9, decay_steps=150),
}
assert tuple(LAB_RECIPES) == LAB_MODEL_IDS, "architectures.LAB_MODEL_IDS names the recipes"

STUDENT_QUALITY_BAND = (0.45, 0.8)
"""Held-out exact-match of the student, built under any numerics profile (measured: 0.57 pinned AVX2,
0.67 generic); the committed weights and any rebuild must land inside it."""


def recipe_for(name: str) -> LabRecipe:
    if name not in LAB_RECIPES:
        raise ConfigError(f"unknown lab model {name!r}; choose one of {', '.join(LAB_RECIPES)}")
    return LAB_RECIPES[name]


def numerics_profile() -> dict:
    """What decides the lab weights besides the recipe: the processor architecture and the CPU kernel path
    (tools.core.numerics); a model built under another profile gets its own folder."""
    numerics = cpu_numerics()
    return {"machine": numerics["machine"], "torch_cpu_capability": numerics["torch_cpu_capability"],
            "mkl_cbwr": numerics["mkl_cbwr"]}


def recipe_sha256(recipe: LabRecipe) -> str:
    """The hash of everything in the code that decides a lab model (not the arithmetic it runs on)."""
    return _canonical_sha256({"lab_builder_version": LAB_BUILDER_VERSION, "recipe": asdict(recipe),
                              "task": lab_tasks.manifest(recipe.task),
                              "tokenizer": _tiny_recipe()["tokenizer"]})


def lab_source() -> str:
    """Where the named lab models come from: `committed` (default) or `build` (COURSE_LAB_MODELS)."""
    source = os.environ.get(LAB_SOURCE_ENV, "committed") or "committed"
    if source not in LAB_SOURCES:
        raise ConfigError(f"{LAB_SOURCE_ENV}={source!r} is not a lab-model source; use one of {', '.join(LAB_SOURCES)}")
    return source


def default_lab_dir() -> Path:
    """`<project root>/build/lab_models`."""
    return resolve_project_root() / "build" / LAB_FOLDER


def committed_lab_folder(name: str) -> Path:
    """The committed folder of the named lab model (not checked; `verified_committed_folder` checks it)."""
    return COMMITTED_LAB_DIR / recipe_for(name).name


def _uses_committed(recipe: LabRecipe, cache_dir) -> bool:
    return cache_dir is None and recipe == LAB_RECIPES.get(recipe.name) and lab_source() == "committed"


def lab_model_folder(recipe: LabRecipe, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder a lab model is loaded from: the committed one for a named recipe (unless
    COURSE_LAB_MODELS=build or a cache folder is given), else its build folder, keyed by the recipe and the
    numerics profile in force."""
    if _uses_committed(recipe, cache_dir):
        return committed_lab_folder(recipe.name)
    root = default_lab_dir() if cache_dir is None else Path(cache_dir).expanduser().resolve()
    key = _canonical_sha256({"recipe_sha256": recipe_sha256(recipe), "cpu_numerics": numerics_profile()})
    return root / f"{recipe.name}-{key[:12]}"


# --- batches and loss ---------------------------------------------------------------------------------------------

def training_batch(rendered: list[tuple[list[int], int]], pad_id: int) -> dict:
    """Right-padded `input_ids`, `attention_mask` and `labels` (reply tokens only) of rendered chats."""
    import torch

    width = max(len(ids) for ids, _ in rendered)
    input_ids = torch.full((len(rendered), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rendered), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(rendered), width), dtype=torch.long)
    for row, (ids, start) in enumerate(rendered):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        labels[row, start:len(ids)] = torch.tensor(ids[start:])
        mask[row, :len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def reply_loss(model, batch):
    """Mean cross-entropy over the reply tokens of a training batch."""
    import torch.nn.functional as F

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["labels"][:, 1:].reshape(-1),
                           ignore_index=IGNORE_INDEX)


def teacher_forced_exact_match(model, batch) -> float:
    """Share of rows whose every reply token is the argmax given the correct prefix: the greedy
    exact-match of the whole reply (up to ties), from one forward pass."""
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    model.train(was_training)
    labels = batch["labels"][:, 1:]
    good = (logits.argmax(-1) == labels) | (labels == IGNORE_INDEX)
    return float(good.all(dim=1).float().mean())


# --- pretraining ---------------------------------------------------------------------------------------------------

def pretraining_problems(recipe: LabRecipe) -> list[lab_tasks.LabProblem]:
    """The problems a lab model is pretrained on: the `train` split of its task, nothing else."""
    return lab_tasks.problems(recipe.task, "train")


def learning_rate_at(recipe: LabRecipe, step: int, decay_from: int | None = None) -> float:
    """Linear warm-up, then constant; from step `decay_from` on, a linear decay over `decay_steps`."""
    rate = recipe.learning_rate * min(1.0, (step + 1) / recipe.warmup_steps)
    if decay_from is None or step < decay_from:
        return rate
    return rate * max(0.0, 1.0 - (step - decay_from) / recipe.decay_steps)


def pretrain(model, tokenizer, recipe: LabRecipe) -> dict:
    """Train `model` in place on the recipe's task (train split only); returns the history.

    Warm-up, then a constant learning rate until the validation exact-match (teacher-forced, checked
    every `check_every` steps) reaches `target_validation`; then `decay_steps` steps of linear decay
    (none: stop at once). When a model learns is a matter of luck within a seed (the step where it
    "gets" the carry varies by hundreds of steps between seeds), so a target, not a step count, decides
    how far it gets. Deterministic for a fixed recipe and CPU numerics profile (the same on every x86-64
    machine, tools.core.numerics): one thread, seeded model init (done by the caller), seeded data order,
    no dropout. `max_steps` caps the constant phase."""
    import torch

    train = [chat_ids(tokenizer, p.messages(), p.target) for p in pretraining_problems(recipe)]
    validation = lab_tasks.sample_problems(recipe.task, "validation", recipe.validation_problems, recipe.seed)
    validation_batch = training_batch([chat_ids(tokenizer, p.messages(), p.target) for p in validation],
                                      tokenizer.pad_token_id)
    rng = random.Random(recipe.seed)
    order: list[int] = []
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, betas=(0.9, 0.98),
                                  weight_decay=recipe.weight_decay)
    history = {"losses": [], "validation": [], "stopped_by": "max_steps", "target_reached_at": None}
    model.train()
    started = time.process_time()
    step, decay_from, last = 0, None, recipe.max_steps
    while step < last:
        if len(order) < recipe.batch_size:
            epoch = list(range(len(train)))
            rng.shuffle(epoch)
            order += epoch
        chosen, order = order[:recipe.batch_size], order[recipe.batch_size:]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(recipe, step, decay_from)
        loss = reply_loss(model, training_batch([train[i] for i in chosen], tokenizer.pad_token_id))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        history["losses"].append(round(float(loss.detach()), 5))
        if not math.isfinite(history["losses"][-1]):
            raise ConfigError(f"lab pretraining of {recipe.name} diverged at step {step} (loss not finite)")
        if decay_from is None and step % recipe.check_every == 0:
            score = teacher_forced_exact_match(model, validation_batch)
            history["validation"].append({"step": step, "exact_match": score})
            if score >= recipe.target_validation:
                history["target_reached_at"] = step
                decay_from, last = step, step + recipe.decay_steps
                history["stopped_by"] = "validation_target"
    if decay_from is not None and recipe.decay_steps:
        history["validation"].append({"step": step, "exact_match": teacher_forced_exact_match(model, validation_batch)})
    history.update(steps=step, train_problems=len(train), cpu_seconds=round(time.process_time() - started, 1))
    return history


# --- building and loading ------------------------------------------------------------------------------------------

def _write_lab(folder: Path, recipe: LabRecipe) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config

    from tools.models.lab_sampling import exact_match

    wall_started, cpu_started = time.perf_counter(), time.process_time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = build_tiny_tokenizer()
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
        config = Qwen2Config(**recipe.architecture(), vocab_size=len(tokenizer), bos_token_id=ids["<|endoftext|>"],
                             eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
        config.architectures = ["Qwen2ForCausalLM"]
        model = _init_model(config, recipe.seed)
        model.generation_config = GenerationConfig(bos_token_id=ids["<|endoftext|>"],
                                                   eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
                                                   pad_token_id=ids["<|endoftext|>"])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe.seed)
            history = pretrain(model, tokenizer, recipe)
        model.eval()
        heldout = exact_match(model, tokenizer, recipe.task, "heldout")
        with _quiet_transformers():
            model.save_pretrained(folder)
        _save_tokenizer(tokenizer, folder)
    finally:
        torch.set_num_threads(threads)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    _write_identity(folder, {
        "model_id": recipe.name,
        "weights": "pretrained",
        "source": "lab_pretraining",
        "seed": recipe.seed,
        "recipe_sha256": recipe_sha256(recipe),
        "architecture_overrides": {},
        "tokenizer": {"kind": "tiny byte-level BPE (Qwen2 pre-tokeniser)", "size": len(tokenizer),
                      "special_token_ids": ids, "chat_template_sha256": _canonical_sha256(CHAT_TEMPLATE)},
        "lab": {"recipe": asdict(recipe), "parameters": parameters, "task": lab_tasks.manifest(recipe.task),
                "pretraining": history,
                "heldout_exact_match": {key: heldout[key] for key in ("task", "split", "total", "correct", "accuracy")},
                "build_seconds": {"wall": round(time.perf_counter() - wall_started, 1),
                                  "cpu": round(time.process_time() - cpu_started, 1), "threads": 1},
                "cpu_numerics": cpu_numerics()},
    })


@contextmanager
def _quiet_transformers():
    """No progress bars from transformers while saving (a notebook shows them as stderr output)."""
    from transformers.utils import logging as transformers_logging

    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()


@contextmanager
def _build_lock(folder: Path):
    """One builder per folder across processes (pytest workers, parallel notebooks): the others wait
    and then find the folder built."""
    import fcntl

    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_lab_model(name: str = "lab", cache_dir: str | os.PathLike | None = None, *,
                    recipe: LabRecipe | None = None) -> Path:
    """The folder of the lab model `name` ("lab" or "lab-teacher"): the committed weights (checked against
    the recipe), or, with COURSE_LAB_MODELS=build or a `cache_dir`, built once under the numerics in force.

    `recipe` replaces the named recipe (tests use shortened ones, always built); its hash names the
    folder, so a changed recipe builds a new folder and never reuses an old one."""
    recipe = recipe or recipe_for(name)
    if not isinstance(recipe, LabRecipe):
        raise ConfigError(f"recipe must be a LabRecipe, got {type(recipe).__name__}")
    lab_tasks.task(recipe.task)
    if _uses_committed(recipe, cache_dir):
        return verified_committed_folder(recipe.name)
    folder = lab_model_folder(recipe, cache_dir)
    with _build_lock(folder):
        return _build_once(folder, recipe_sha256(recipe), lambda temp: _write_lab(temp, recipe))


def verified_committed_folder(name: str) -> Path:
    """The committed folder of `name`, after checking it was built from the current recipe and that every
    file still has the hash its identity file recorded."""
    import json

    from tools.core.records import sha256_file
    from tools.models.architectures import IDENTITY_FILE

    folder = committed_lab_folder(name)
    fix = (f"rebuild and commit them with `python -m tools.models lab-commit`, or build them here with "
           f"{LAB_SOURCE_ENV}=build")
    identity_path = folder / IDENTITY_FILE
    if not identity_path.is_file():
        raise ConfigError(f"the committed lab model {name!r} is missing ({folder}); {fix}")
    identity = json.loads(identity_path.read_text(encoding="utf-8"))
    if identity.get("recipe_sha256") != recipe_sha256(recipe_for(name)):
        raise ConfigError(f"the committed lab model {name!r} was built from another recipe than "
                          f"tools/models/lab.py's; {fix}")
    for file_name, expected in identity.get("files", {}).items():
        path = folder / file_name
        if not path.is_file() or sha256_file(path) != expected:
            raise ConfigError(f"{path} is missing or differs from the hash in {IDENTITY_FILE}; {fix}")
    return folder


def commit_lab_models(destination: str | os.PathLike | None = None) -> dict[str, Path]:
    """Pretrain every named lab model under the pinned numerics profile and write it into the committed
    folder (`lab-commit`); refuses under any other profile, so the committed weights have one provenance."""
    import shutil
    import tempfile

    from tools.core.numerics import PINNED_CPU_NUMERICS

    in_force = {name: os.environ.get(name) for name in PINNED_CPU_NUMERICS}
    if in_force != PINNED_CPU_NUMERICS:
        raise ConfigError(f"the committed lab weights are built under the pinned numerics {PINNED_CPU_NUMERICS}; "
                          f"in force: {in_force}")
    target = COMMITTED_LAB_DIR if destination is None else Path(destination)
    target.mkdir(parents=True, exist_ok=True)
    written = {}
    with tempfile.TemporaryDirectory(prefix="lab-commit-") as scratch:
        for name, recipe in LAB_RECIPES.items():
            built = build_lab_model(name, scratch, recipe=recipe)
            folder = target / name
            if folder.exists():
                shutil.rmtree(folder)
            shutil.copytree(built, folder)
            for path in folder.iterdir():
                path.chmod(0o644)
            written[name] = folder
    return written


def build_lab_models(cache_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Build (once) every named lab model; `{name: folder}`."""
    return {name: build_lab_model(name, cache_dir) for name in LAB_RECIPES}


def lab_identity(folder: str | os.PathLike) -> dict:
    """The `lab` section of a lab model folder's identity file (recipe, pretraining, held-out exact-match)."""
    import json

    from tools.models.architectures import IDENTITY_FILE

    path = Path(folder) / IDENTITY_FILE
    if not path.is_file():
        raise ConfigError(f"{folder} has no {IDENTITY_FILE}; build it with build_lab_model()")
    identity = json.loads(path.read_text(encoding="utf-8"))
    if "lab" not in identity:
        raise ConfigError(f"{folder} is not a lab model")
    return {**identity["lab"], "weights_sha256": identity["files"].get("model.safetensors"),
            "fingerprint": identity["fingerprint"]}


def shortened(name: str, **changes) -> LabRecipe:
    """A copy of a named recipe with some fields changed (tests, benchmarks)."""
    return replace(recipe_for(name), **changes)
