"""Fresh-process work for project 62: resume a checkpoint, or reload a saved adapter and evaluate it.

Project 62 proves its artefacts outside the process that wrote them: this command starts with nothing
in memory but the files, so a resume that depends on a leftover object, or an adapter that cannot be
loaded from its folder, fails here. `verify` does both in one new process (each from freshly loaded
files: the resume on its own base, the reload on another). It writes one JSON result to `--out`.

    python -m tools.experiments.sft_chain.worker resume --checkpoint DIR ... --out result.json
    python -m tools.experiments.sft_chain.worker reload --adapter DIR ... --out result.json
    python -m tools.experiments.sft_chain.worker verify --checkpoint DIR --adapter DIR ... --out result.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.core.records import load_record
from tools.data import sft_raw
from tools.experiments.cli import add_common_arguments


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments.sft_chain.worker")
    parser.add_argument("action", choices=("resume", "reload", "verify"))
    add_common_arguments(parser, ("model", "model_source", "device"), model={"required": True},
                         device={"default": "cpu"})
    parser.add_argument("--base", default="float32")
    parser.add_argument("--admitted", required=True, help="project 64's admitted data record")
    parser.add_argument("--admitted-sha256", required=True)
    parser.add_argument("--config", required=True, help="the TrainConfig as JSON")
    parser.add_argument("--checkpoint", help="resume: the checkpoint folder")
    parser.add_argument("--adapter", help="reload: the adapter folder (peft format)")
    parser.add_argument("--out", required=True)
    return parser


def run_action(args) -> dict:
    from tools.experiments.sft_chain import training

    config = json.loads(args.config)
    config["target_modules"] = tuple(config["target_modules"])
    config = training.TrainConfig(**config)
    admitted = load_record(args.admitted, expected_sha256=args.admitted_sha256)
    result = {}
    with training.one_thread_on_cpu(args.device):
        if args.action in ("resume", "verify"):
            model, tokenizer, _ = training.load_base(args.model, args.model_source, args.base, args.device)
            train = [training.render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["splits"]["train"]]
            evaluation = [training.render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["evaluation"]]
            model = training.attach_adapter(model, config)
            resumed = training.train_run(model, tokenizer, train, evaluation, config, device=args.device,
                                         resume_from=Path(args.checkpoint))
            result["resumed"] = {key: resumed[key] for key in ("first_step", "losses", "optimiser_steps", "eval_loss",
                                                               "exact_match", "adapter_sha256")}
        if args.action in ("reload", "verify"):
            from peft import PeftModel

            model, tokenizer, _ = training.load_base(args.model, args.model_source, args.base, args.device)
            evaluation = [training.render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["evaluation"]]
            model = PeftModel.from_pretrained(model, args.adapter)
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            result["reloaded"] = training.evaluate(model, evaluation, pad_id, args.device)
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    result = run_action(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
