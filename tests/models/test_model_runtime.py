"""Tests of the course models (`tools.models`, used through its product name `tools.model_runtime`):
cache lookup, the tiny offline model, random_init, sampling kwargs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from chapter_factory import REPO_ROOT
from tools import model_runtime as mr
from tools.models import architectures, builders, vocabulary
from tools.errors import ConfigError, ModelCacheMissingError
from tools.core.preflight import preflight_exit_code, preflight_report
from tools.core.records import sha256_file

QWEN = mr.QWEN25_05B_INSTRUCT
SAMPLE_TEXTS = (
    "What is 12 + 7? The answer is 19.",
    "Compute 81 - 47.\n\n  Then check it.",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "caf\u0065\u0301 na\u00efve \u4f60\u597d 3.14159",  # NFC composes e + combining acute
    "I'll answer: 1234567890!!",
)


def _copy_as_pretrained(tiny_model_dir: Path, target: Path, *, hub_blobs: Path | None = None) -> Path:
    """Copy the tiny model's files (not its identity file) as if they were downloaded weights."""
    target.mkdir(parents=True)
    for path in tiny_model_dir.iterdir():
        if path.name == mr.IDENTITY_FILE:
            continue
        if hub_blobs is None:
            shutil.copy2(path, target / path.name)
        else:  # hub cache layout: snapshot entries are symlinks to blobs named by content hash
            hub_blobs.mkdir(parents=True, exist_ok=True)
            blob = hub_blobs / sha256_file(path)
            shutil.copy2(path, blob)
            (target / path.name).symlink_to(os.path.relpath(blob, target))
    return target


def _fake_hub_cache(tiny_model_dir: Path, cache: Path, *, with_ref: bool = True, revision: str = "abc123") -> Path:
    repo = cache / "models--Qwen--Qwen2.5-0.5B-Instruct"
    snapshot = _copy_as_pretrained(tiny_model_dir, repo / "snapshots" / revision, hub_blobs=repo / "blobs")
    if with_ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision, encoding="utf-8")
    return snapshot


# ---------------------------------------------------------------------------
# Arguments and cache paths
# ---------------------------------------------------------------------------

def test_unknown_source_and_bad_ids_raise_config_error_before_any_work(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match="unknown model source 'hub'"):
        mr.resolve_model(QWEN, source="hub", cache_dir=cache)
    for bad in ("", "../etc", "a/b/c", "Qwen/..", None):
        with pytest.raises(ConfigError, match="invalid model id"):
            mr.resolve_model(bad, cache_dir=cache)
    with pytest.raises(ConfigError, match="no architecture config"):
        mr.resolve_model("someone/unknown-model", source="random_init", cache_dir=cache)
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        mr.build_random_init_model(QWEN, cache, num_hidden_layers=0)
    assert not cache.exists()


def test_download_command_and_expected_path(tmp_path):
    cache = tmp_path / "my cache"
    assert mr.download_command(QWEN, cache) == f"hf download {QWEN} --cache-dir '{cache}'"
    assert mr.download_command(mr.TINY_MODEL_ID, cache) is None
    assert mr.expected_model_path(QWEN, cache) == cache / "models--Qwen--Qwen2.5-0.5B-Instruct"
    assert mr.expected_model_path(mr.TINY_MODEL_ID, cache) == cache / "tiny-qwen2"


def test_download_command_uses_a_cli_the_installed_huggingface_hub_provides():
    cli = Path(sys.executable).parent / "hf"
    assert cli.exists(), "huggingface_hub's `hf` command is not installed next to this python"
    completed = subprocess.run([str(cli), "download", "--help"], capture_output=True, text=True, timeout=600,
                               check=False, env={**os.environ, "HF_HUB_DISABLE_UPDATE_CHECK": "1"})
    assert completed.returncode == 0, completed.stderr
    assert "--cache-dir" in completed.stdout


def test_cache_dir_defaults_and_relative_paths(monkeypatch, tmp_path):
    root = REPO_ROOT
    monkeypatch.chdir(root)
    monkeypatch.delenv(mr.MODEL_CACHE_ENV, raising=False)
    monkeypatch.delenv("COURSE_PROJECT_ROOT", raising=False)
    assert mr.default_cache_dir() == root / "model_cache"
    assert mr.expected_model_path(QWEN, "model_cache").parent == root / "model_cache"
    monkeypatch.setenv(mr.MODEL_CACHE_ENV, str(tmp_path))
    assert mr.default_cache_dir() == tmp_path.resolve()
    assert mr.download_command(QWEN).endswith(str(tmp_path.resolve()))


# ---------------------------------------------------------------------------
# Local cache
# ---------------------------------------------------------------------------

def test_missing_model_raises_with_folder_and_download_command(tmp_path):
    cache = tmp_path / "empty"
    with pytest.raises(ModelCacheMissingError) as caught:
        mr.resolve_model(QWEN, cache_dir=cache)
    message = str(caught.value)
    assert QWEN in message and str(cache) in message
    assert f"hf download {QWEN} --cache-dir {cache}" in message
    assert isinstance(caught.value, FileNotFoundError)
    assert mr.find_local_model(QWEN, cache) is None


def test_hub_cache_layout_is_found_loaded_and_identified(tiny_model_dir, tmp_path):
    cache = tmp_path / "hub"
    snapshot = _fake_hub_cache(tiny_model_dir, cache)
    assert mr.resolve_model(QWEN, cache_dir=cache) == snapshot
    assert mr.expected_model_path(QWEN, cache) == snapshot
    identity = mr.model_identity(snapshot)
    assert identity["model_id"] == QWEN and identity["weights"] == "pretrained" and identity["source"] == "local"
    assert identity["revision"] == "abc123"
    assert identity["config_sha256"] == sha256_file(snapshot / "config.json")
    assert identity["weights_sha256"] == sha256_file(snapshot / "model.safetensors")
    model, tokenizer = mr.load_causal_lm(snapshot)
    assert model.config.hidden_size == mr.TINY_ARCHITECTURE["hidden_size"]
    assert tokenizer("What is 2 + 3?")["input_ids"]


def test_hub_snapshot_without_refs_is_found_by_scanning(tiny_model_dir, tmp_path):
    cache = tmp_path / "hub"
    snapshot = _fake_hub_cache(tiny_model_dir, cache, with_ref=False, revision="def456")
    assert mr.resolve_model(QWEN, cache_dir=cache) == snapshot


def test_incomplete_snapshot_is_reported_not_returned(tiny_model_dir, tmp_path):
    cache = tmp_path / "hub"
    snapshot = _fake_hub_cache(tiny_model_dir, cache)
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(ModelCacheMissingError, match="incomplete .missing model.safetensors"):
        mr.resolve_model(QWEN, cache_dir=cache)
    check = mr.model_cache_check(QWEN, cache)
    assert check["ok"] is False and check["fix"] == mr.download_command(QWEN, cache)


@pytest.mark.parametrize("layout", [("Qwen2.5-0.5B-Instruct",), ("Qwen", "Qwen2.5-0.5B-Instruct")])
def test_plain_folder_layouts_are_found(tiny_model_dir, tmp_path, layout):
    cache = tmp_path / "plain"
    folder = _copy_as_pretrained(tiny_model_dir, cache.joinpath(*layout))
    assert mr.resolve_model(QWEN, cache_dir=cache) == folder
    identity = mr.model_identity(folder)
    assert identity["model_id"] == QWEN and identity["weights"] == "pretrained"
    assert identity["weights_sha256"] is None  # not read, so not reported


def test_model_cache_check_feeds_preflight_exit_codes(tiny_model_dir, tmp_path):
    missing = mr.model_cache_check(QWEN, tmp_path / "none")
    assert missing["ok"] is False and missing["severity"] == "model_cache"
    assert preflight_exit_code(preflight_report(extra_checks=[missing])) == 4
    _fake_hub_cache(tiny_model_dir, tmp_path / "hub")
    assert mr.model_cache_check(QWEN, tmp_path / "hub")["ok"] is True
    assert mr.model_cache_check(mr.TINY_MODEL_ID, tmp_path / "none")["ok"] is True
    assert mr.model_cache_check(QWEN, tmp_path / "none", source="random_init")["ok"] is True
    unknown = mr.model_cache_check("someone/unknown", tmp_path / "none", source="random_init")
    assert preflight_exit_code(preflight_report(extra_checks=[unknown])) == 3


# ---------------------------------------------------------------------------
# Tiny model: build, identity, reuse, atomicity
# ---------------------------------------------------------------------------

def test_tiny_folder_identity(tiny_model_dir):
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", mr.IDENTITY_FILE):
        assert (tiny_model_dir / name).is_file(), name
    built = json.loads((tiny_model_dir / mr.IDENTITY_FILE).read_text(encoding="utf-8"))
    files = {p.name: sha256_file(p) for p in tiny_model_dir.iterdir() if p.name != mr.IDENTITY_FILE}
    assert built["files"] == files
    identity = mr.model_identity(tiny_model_dir)
    assert identity["model_id"] == "tiny" and identity["weights"] == "random_init"
    assert identity["source"] == "offline_builder"
    assert identity["config_sha256"] == sha256_file(tiny_model_dir / "config.json")
    assert identity["fingerprint"] == built["fingerprint"]


def test_tiny_build_is_deterministic_reused_and_leaves_no_temp(tiny_model_dir, tmp_path):
    torch.manual_seed(12345)  # the caller's RNG state must neither matter nor change
    state = torch.random.get_rng_state()
    other = mr.build_tiny_model(tmp_path)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert mr.model_identity(other)["fingerprint"] == mr.model_identity(tiny_model_dir)["fingerprint"]
    stamp = (other / "model.safetensors").stat().st_mtime_ns
    assert mr.resolve_model("tiny", source="random_init", cache_dir=tmp_path) == other
    assert (other / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == ["tiny-qwen2"]
    assert other.stat().st_mode & 0o055 == 0o055  # readable by others, unlike a bare mkdtemp folder


def test_tiny_tokenizer_is_the_same_in_another_process():
    """BPE training must not depend on per-process hash seeds: compare with a fresh interpreter."""
    script = ("import hashlib; from tools.model_runtime import train_tiny_bpe; "
              "print(hashlib.sha256(train_tiny_bpe().to_str().encode()).hexdigest())")
    root = REPO_ROOT
    completed = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True,
                               timeout=600, check=False)  # a hang guard, far above the run
    assert completed.returncode == 0, completed.stderr
    here = mr.train_tiny_bpe().to_str().encode()
    assert completed.stdout.strip().splitlines()[-1] == hashlib.sha256(here).hexdigest()


def test_losing_a_concurrent_build_keeps_the_winner(tmp_path, monkeypatch):
    real_writer = builders._write_tiny
    winner = tmp_path / "tiny-qwen2"

    def writer_that_loses_the_race(temp: Path) -> None:
        rival = tmp_path / "rival"
        rival.mkdir()
        real_writer(rival)
        os.rename(rival, winner)  # another process finishes first
        real_writer(temp)

    monkeypatch.setattr(builders, "_write_tiny", writer_that_loses_the_race)
    assert mr.build_tiny_model(tmp_path) == winner
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-qwen2"]
    assert mr.model_identity(winner)["model_id"] == "tiny"


def test_failed_build_leaves_nothing(tmp_path, monkeypatch):
    def broken_writer(temp: Path) -> None:
        (temp / "config.json").write_text("{}", encoding="utf-8")
        raise RuntimeError("disk full")

    monkeypatch.setattr(builders, "_write_tiny", broken_writer)
    with pytest.raises(RuntimeError, match="disk full"):
        mr.build_tiny_model(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_altered_or_foreign_folder_is_refused(tiny_model_dir, tmp_path):
    copy = shutil.copytree(tiny_model_dir, tmp_path / "tiny-qwen2")
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    config["num_hidden_layers"] = 3
    (copy / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match="changed after it was built"):
        mr.resolve_model("tiny", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="altered"):
        mr.model_identity(copy)
    (copy / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}), encoding="utf-8")
    identity = json.loads((copy / mr.IDENTITY_FILE).read_text(encoding="utf-8"))
    identity["files"]["config.json"] = sha256_file(copy / "config.json")
    identity["recipe_sha256"] = "0" * 64  # as if built by an older recipe
    (copy / mr.IDENTITY_FILE).write_text(json.dumps(identity), encoding="utf-8")
    with pytest.raises(ConfigError, match="another recipe"):
        mr.resolve_model("tiny", cache_dir=tmp_path)
    (copy / mr.IDENTITY_FILE).unlink()
    with pytest.raises(ConfigError, match="no course_model.json"):
        mr.resolve_model("tiny", cache_dir=tmp_path)


# ---------------------------------------------------------------------------
# Tiny tokenizer and chat template
# ---------------------------------------------------------------------------

def test_tokenizer_ids_survive_save_and_autotokenizer_reload(tiny_model_dir):
    built = mr.build_tiny_tokenizer()
    reloaded = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert type(reloaded).__name__ == "Qwen2Tokenizer"
    assert len(reloaded) == len(built)
    for text in SAMPLE_TEXTS:
        ids = built(text)["input_ids"]
        assert reloaded(text)["input_ids"] == ids, text
        assert reloaded.decode(ids) == built.decode(ids)
    assert [reloaded.convert_tokens_to_ids(t) for t in mr.SPECIAL_TOKENS] == [0, 1, 2]
    assert reloaded("<|im_start|>")["input_ids"] == [1]
    assert reloaded.eos_token == "<|im_end|>" and reloaded.pad_token == "<|endoftext|>"
    assert reloaded.bos_token is None
    assert reloaded.decode(reloaded("What is 12 + 7?")["input_ids"]) == "What is 12 + 7?"
    digits = reloaded("2024")["input_ids"]
    assert len(digits) == 4  # Qwen2 splits numbers into single digits


def test_tokenizer_trained_without_qwen2_pipeline_reloads_with_other_ids(tmp_path):
    """The measured fact behind the Qwen2 pipeline: a plain ByteLevel BPE changes ids on reload."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(mr.tiny_corpus(), trainers.BpeTrainer(
        vocab_size=mr.TINY_TOKENIZER_VOCAB_TARGET, min_frequency=2, special_tokens=list(mr.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    plain = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    builders._save_tokenizer(plain, tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert any(reloaded(t)["input_ids"] != plain(t)["input_ids"] for t in SAMPLE_TEXTS)


def test_chat_template_renders_qwen_style(tiny_tokenizer):
    tokenizer = tiny_tokenizer
    user = [{"role": "user", "content": "What is 2 + 3?"}]
    text = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
    with_system = [{"role": "system", "content": "Answer briefly."}, *user, {"role": "assistant", "content": "5"}]
    assert tokenizer.apply_chat_template(with_system, tokenize=False) == (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
        "<|im_start|>assistant\n5<|im_end|>\n")
    ids = tokenizer.apply_chat_template(user, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids == tokenizer(text)["input_ids"]
    assert ids[-3:] == tokenizer("<|im_start|>assistant\n")["input_ids"]


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

def test_load_causal_lm_returns_tiny_qwen2_untouched(tiny_model_dir):
    model, tokenizer = mr.load_causal_lm(tiny_model_dir)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.dtype == torch.float32 and model.device.type == "cpu"
    assert model.config.use_cache == plain.config.use_cache
    assert model.training == plain.training
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
            config.intermediate_size) == (64, 2, 4, 2, 128)
    assert config.vocab_size >= len(tokenizer) and config.tie_word_embeddings
    assert config.eos_token_id == tokenizer.eos_token_id
    with torch.no_grad():
        logits = model(**tokenizer("What is 2 + 3?", return_tensors="pt")).logits
    assert logits.shape[-1] == config.vocab_size and torch.isfinite(logits).all()
    assert sum(p.numel() for p in model.parameters()) < 200_000


def test_load_causal_lm_dtype_and_device_checks(tiny_model_dir, tmp_path):
    model, _ = mr.load_causal_lm(tiny_model_dir, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="unsupported dtype"):
        mr.load_causal_lm(tiny_model_dir, dtype=torch.int8)
    with pytest.raises(ConfigError, match="invalid device"):
        mr.load_causal_lm(tiny_model_dir, device="tpu:zero")
    with pytest.raises(ConfigError, match="no config.json"):
        mr.load_causal_lm(tmp_path)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            mr.load_causal_lm(tiny_model_dir, device="cuda")


# ---------------------------------------------------------------------------
# Sampling: generate-time log-probs equal a forward pass only without top-k / top-p
# ---------------------------------------------------------------------------

def _generation_vs_forward(model, tokenizer, kwargs, temperature):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 + 7?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    torch.manual_seed(0)
    out = model.generate(**prompt, **kwargs, return_dict_in_generate=True, output_scores=True, output_logits=True)
    start = prompt["input_ids"].shape[1]
    with torch.no_grad():
        forward = model(out.sequences).logits[:, start - 1:-1]
    expected = torch.log_softmax(forward / temperature, dim=-1)
    from_scores = torch.log_softmax(torch.stack(out.scores, dim=1), dim=-1)
    from_logits = torch.log_softmax(torch.stack(out.logits, dim=1) / temperature, dim=-1)
    chosen = out.sequences[:, start:, None]
    chosen_gap = (from_scores.gather(-1, chosen) - expected.gather(-1, chosen)).abs().max().item()
    return chosen_gap, (from_scores - expected).abs().max().item(), (from_logits - expected).abs().max().item()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_kwargs_give_forward_pass_log_probs(fresh_tiny_model, tiny_tokenizer, temperature):
    model, tokenizer = fresh_tiny_model, tiny_tokenizer
    # Qwen2.5-Instruct's generation config narrows sampling; the kwargs must override it.
    model.generation_config.top_k, model.generation_config.top_p = 20, 0.8
    model.generation_config.repetition_penalty = 1.05
    chosen_gap, full_gap, raw_gap = _generation_vs_forward(
        model, tokenizer, mr.sampling_generation_kwargs(temperature, 12), temperature)
    assert chosen_gap < 5e-6 and full_gap < 5e-6 and raw_gap < 5e-6


def test_default_sampling_is_not_the_forward_distribution(fresh_tiny_model, tiny_tokenizer):
    model, tokenizer = fresh_tiny_model, tiny_tokenizer
    chosen_gap, full_gap, raw_gap = _generation_vs_forward(
        model, tokenizer, {"do_sample": True, "max_new_tokens": 12}, 1.0)
    assert raw_gap < 5e-6  # the raw logits agree ...
    assert full_gap > 1e-2  # ... but top_k=50 reshapes what is sampled from


def test_sampling_generation_kwargs_contents_and_validation():
    kwargs = mr.sampling_generation_kwargs(0.7, 64)
    assert kwargs["do_sample"] is True and kwargs["top_k"] == 0 and kwargs["top_p"] == 1.0
    assert kwargs["temperature"] == 0.7 and kwargs["max_new_tokens"] == 64
    assert kwargs["repetition_penalty"] == 1.0 and kwargs["num_beams"] == 1
    for temperature in (0, -1.0, float("nan"), float("inf"), "1.0", True):
        with pytest.raises(ConfigError, match="temperature"):
            mr.sampling_generation_kwargs(temperature, 8)
    for count in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="max_new_tokens"):
            mr.sampling_generation_kwargs(1.0, count)


# ---------------------------------------------------------------------------
# random_init: Qwen2.5-0.5B-Instruct architecture with random weights
# ---------------------------------------------------------------------------

def test_random_init_full_architecture_has_qwen25_05b_parameter_count():
    from transformers import Qwen2Config

    config = Qwen2Config(**mr.RANDOM_INIT_ARCHITECTURES[QWEN])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == 494_032_768  # published size of Qwen2.5-0.5B


@pytest.mark.slow
def test_random_init_build_with_shrunken_depth(tmp_path):
    folder = mr.build_random_init_model(QWEN, tmp_path, num_hidden_layers=1)
    assert folder == mr.random_init_folder(QWEN, tmp_path, 1) != mr.random_init_folder(QWEN, tmp_path)
    config = AutoConfig.from_pretrained(folder)
    assert config.architectures == ["Qwen2ForCausalLM"] and config.model_type == "qwen2"
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.intermediate_size,
            config.vocab_size, config.max_position_embeddings) == (896, 14, 2, 4864, 151936, 32768)
    assert config.rope_parameters["rope_theta"] == 1000000.0 and config.rms_norm_eps == 1e-6
    assert config.tie_word_embeddings and config.hidden_act == "silu"
    assert (config.bos_token_id, config.eos_token_id) == (151643, 151645)
    assert config.num_hidden_layers == 1
    identity = mr.model_identity(folder)
    assert identity["weights"] == "random_init" and identity["source"] == "random_init"
    assert identity["model_id"] == QWEN and identity["architecture_overrides"] == {"num_hidden_layers": 1}
    assert "padded to the vocabulary" in identity["tokenizer"]["note"]
    model, tokenizer = mr.load_causal_lm(folder)
    # verl's vLLM rollout masks logits at or above len(tokenizer): the two sizes must agree exactly.
    assert len(tokenizer) == config.vocab_size == identity["tokenizer"]["size"]
    assert (tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.eos_token_id) == (151643, 151645)
    assert tokenizer.pad_token_id == config.bos_token_id
    assert vocabulary.vocabulary_alignment(folder)["aligned"] is True
    per_layer = (494_032_768 - 151936 * 896 - 896) // 24
    assert sum(p.numel() for p in model.parameters()) == 151936 * 896 + 896 + per_layer
    weights = model.model.embed_tokens.weight
    assert 0.015 < weights.std().item() < 0.025  # initializer_range 0.02, not zeros or ones
    with torch.no_grad():
        logits = model(**tokenizer("What is 2 + 3?", return_tensors="pt")).logits
    assert logits.shape[-1] == 151936 and torch.isfinite(logits).all()


def test_random_init_tokenizer_encodes_text_as_the_tiny_one_apart_from_special_ids(tiny_tokenizer):
    padded = builders.build_tiny_tokenizer(vocab_size=151936, special_token_ids=architectures.RANDOM_INIT_SPECIAL_TOKEN_IDS[QWEN])
    moved = {0: 151643, 1: 151644, 2: 151645}
    assert len(padded) == 151936
    for text in SAMPLE_TEXTS:
        assert padded(text)["input_ids"] == [moved.get(i, i) for i in tiny_tokenizer(text)["input_ids"]]
    filler = architectures.FILLER_TOKEN.format(id=5000)
    assert padded.convert_tokens_to_ids(filler) == 5000
    assert 5000 not in padded(filler)["input_ids"]  # no text encodes to a filler id


def test_padding_refuses_colliding_or_out_of_range_special_ids():
    backend = builders.train_tiny_bpe()
    with pytest.raises(ConfigError, match="collide"):
        builders.pad_vocabulary(backend, 1000, {"<|endoftext|>": 5, "<|im_start|>": 998, "<|im_end|>": 999})
    with pytest.raises(ConfigError, match="exceed"):
        builders.pad_vocabulary(backend, 1000, {"<|endoftext|>": 997, "<|im_start|>": 998, "<|im_end|>": 1000})
    with pytest.raises(ConfigError, match="cover exactly"):
        builders.pad_vocabulary(backend, 1000, {"<|endoftext|>": 997})


def test_vocabulary_check_of_tiny_random_init_and_pretrained_folders(tiny_model_dir, tmp_path):
    tiny = vocabulary.vocabulary_alignment(tiny_model_dir)
    assert tiny["aligned"] is False and tiny["tokenizer_length"] < tiny["vocab_size"]  # rounded up to 64
    with pytest.raises(ConfigError, match="masks logits"):
        vocabulary.require_vocabulary_alignment(tiny_model_dir)
    assert vocabulary.vocabulary_check("tiny", tiny_model_dir.parent)["ok"] is False
    # the same files without the identity file are "pretrained": padding rows beyond the tokenizer are fine
    pretrained = _copy_as_pretrained(tiny_model_dir, tmp_path / "cache" / "Qwen2.5-0.5B-Instruct")
    assert vocabulary.vocabulary_alignment(pretrained)["aligned"] is True
    assert vocabulary.vocabulary_check(QWEN, tmp_path / "cache")["ok"] is True
    missing = vocabulary.vocabulary_check(QWEN, tmp_path / "empty")
    assert (missing["ok"], missing["severity"]) == (False, "model_cache")  # a missing model alone stays exit 4
    planned = vocabulary.vocabulary_check(QWEN, tmp_path / "empty", source="random_init")
    assert planned["ok"] is True and "151936" in planned["detail"]
