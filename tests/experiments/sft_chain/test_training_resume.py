"""The chain's checkpoints resume anything: a run with dropout and a decaying schedule, stopped halfway and
resumed in a fresh process, matches the uninterrupted run bit for bit; a resume on other data is refused
before any step, in process and in a fresh process, and writes nothing."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from tools.core.paths import resolve_project_root
from tools.core.records import record_header, save_json_record_once
from tools.data import sft_raw
from tools.errors import ConfigError
from tools.experiments.sft_chain import training

pytestmark = pytest.mark.slow  # trains the lab model twice (24 steps) and starts two fresh processes

CONFIG = training.TrainConfig(rank=4, steps=24, batch_size=8, dropout=0.2, schedule="cosine", learning_rate=5e-3,
                              replay_fraction=0.5, seed=7)
CHECKPOINT = 11


def records(seed: int) -> list[dict]:
    delivery = sft_raw.build_delivery(seed=seed)
    return [r for r in delivery.splits["train"] if r["id"] not in delivery.planted and sft_raw.verify_answer(r)]


def admitted_record(path, train: list[dict], validation: list[dict]):
    """A record the worker reads as 64's admitted data (header, splits)."""
    body = {**record_header(schema_version="sft-admitted-data/v2", chapter="64", stage="admitted_data",
                            run_mode="cpu_smoke", run_label="resume_test"),
            "splits": {"train": train, "validation": validation}}
    return save_json_record_once(path, body)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The whole run in this process, with its checkpoint after step CHECKPOINT."""
    folder = tmp_path_factory.mktemp("resume")
    base, tokenizer, _ = training.load_base("lab", "local", "float32", "cpu")
    train = records(sft_raw.DELIVERY_SEED)
    data = training.train_data(tokenizer, train)
    validation = sft_raw.build_delivery().splits["validation"][:32]
    with training.one_thread_on_cpu("cpu"):
        model = training.attach_adapter(copy.deepcopy(base), CONFIG)
        result = training.train_run(model, tokenizer, data, {}, CONFIG, device="cpu", checkpoint_step=CHECKPOINT,
                                    checkpoint_dir=folder / "checkpoint")
    admitted = folder / "admitted.json"
    digest = admitted_record(admitted, train, validation)
    return {"folder": folder, "result": result, "base": base, "tokenizer": tokenizer, "data": data,
            "admitted": admitted, "admitted_sha256": digest}


def worker(arguments: list[str], out) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tools.experiments.sft_chain.worker", *arguments, "--model", "lab",
            "--config", json.dumps(CONFIG.public()), "--out", str(out)]
    return subprocess.run(argv, cwd=resolve_project_root(), capture_output=True, text=True, timeout=600)


def test_the_run_really_uses_dropout_and_a_decaying_schedule(uninterrupted):
    rates = uninterrupted["result"]["learning_rates"]
    assert rates[0] == CONFIG.learning_rate and rates[-1] < rates[CHECKPOINT] < rates[0]  # cosine decay
    # dropout draws from torch's generator: the same run with another random state trains differently
    with training.one_thread_on_cpu("cpu"):
        model = training.attach_adapter(copy.deepcopy(uninterrupted["base"]), CONFIG)
        import torch

        torch.manual_seed(12345)  # after the adapter's seeded init: only dropout's draws change
        other = training.train_run(model, uninterrupted["tokenizer"], uninterrupted["data"], {}, CONFIG, device="cpu")
    assert other["losses"][0] == uninterrupted["result"]["losses"][0]  # LoRA's B starts at zero: dropout acts from step 2
    assert other["losses"][1:] != uninterrupted["result"]["losses"][1:]


def test_a_resume_in_a_fresh_process_matches_bit_for_bit(uninterrupted, tmp_path):
    out = tmp_path / "resumed.json"
    done = worker(["resume", "--checkpoint", str(uninterrupted["folder"] / "checkpoint"), "--admitted",
                   str(uninterrupted["admitted"]), "--admitted-sha256", uninterrupted["admitted_sha256"]], out)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = json.loads(out.read_text(encoding="utf-8"))["resumed"]
    full = uninterrupted["result"]
    assert resumed["first_step"] == CHECKPOINT + 1 and resumed["optimiser_steps"][0] == CHECKPOINT + 1
    assert resumed["losses"] == full["losses"][CHECKPOINT:]  # exact floats, not a tolerance
    assert resumed["learning_rates"] == full["learning_rates"][CHECKPOINT:]
    assert resumed["adapter_sha256"] == full["adapter_sha256"]


def test_a_checkpoint_without_its_random_state_would_not_match(uninterrupted, monkeypatch):
    """The check can fail: resume the same checkpoint with dropout's generator elsewhere, and the curve differs."""
    import torch

    monkeypatch.setattr(training, "set_random_states", lambda states: torch.manual_seed(99))  # a checkpoint that lost it
    with training.one_thread_on_cpu("cpu"):
        model = training.attach_adapter(copy.deepcopy(uninterrupted["base"]), CONFIG)
        resumed = training.train_run(model, uninterrupted["tokenizer"], uninterrupted["data"], {}, CONFIG,
                                     device="cpu", resume_from=uninterrupted["folder"] / "checkpoint")
    assert resumed["first_step"] == CHECKPOINT + 1
    assert resumed["losses"] != uninterrupted["result"]["losses"][CHECKPOINT:]


def test_a_resume_on_other_data_is_refused_before_any_step(uninterrupted, tmp_path):
    other = training.train_data(uninterrupted["tokenizer"], records(sft_raw.DELIVERY_SEED + 1))
    assert other.sha256 != uninterrupted["data"].sha256
    model = training.attach_adapter(copy.deepcopy(uninterrupted["base"]), CONFIG)
    before = training.state_sha256(training.adapter_state(model))
    with pytest.raises(ConfigError, match="a resume on other data is refused"):
        training.train_run(model, uninterrupted["tokenizer"], other, {}, CONFIG, device="cpu",
                           resume_from=uninterrupted["folder"] / "checkpoint")
    assert training.state_sha256(training.adapter_state(model)) == before  # nothing was loaded or trained
    # the same in a fresh process: the worker exits non-zero, names the refusal and writes no result
    admitted = tmp_path / "other.json"
    digest = admitted_record(admitted, records(sft_raw.DELIVERY_SEED + 1), [])
    out = tmp_path / "resumed.json"
    done = worker(["resume", "--checkpoint", str(uninterrupted["folder"] / "checkpoint"), "--admitted", str(admitted),
                   "--admitted-sha256", digest], out)
    assert done.returncode != 0 and "a resume on other data is refused" in done.stderr and not out.exists()


def test_a_resume_of_another_configuration_is_refused(uninterrupted):
    other = training.TrainConfig(**{**CONFIG.public(), "target_modules": CONFIG.target_modules, "dropout": 0.1})
    model = training.attach_adapter(copy.deepcopy(uninterrupted["base"]), other)
    with pytest.raises(ConfigError, match="another configuration"):
        training.train_run(model, uninterrupted["tokenizer"], uninterrupted["data"], {}, other, device="cpu",
                           resume_from=uninterrupted["folder"] / "checkpoint")
