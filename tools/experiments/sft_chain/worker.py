"""Fresh-process work for project 62: resume a checkpoint, reload a saved adapter, load the merged export.

Project 62 proves its artefacts outside the process that wrote them: this command starts with nothing
in memory but the files, so a resume that depends on a leftover object (a random state, the data
order, the scheduler), an adapter that cannot be loaded from its folder, or a merged export that is
not the base plus the adapter, fails here. `verify` does all three in one new process, each from
freshly loaded files: the resume on its own base, the reload on another, the merged model alone. It
reads the admitted data (sha256 checked) and measures on its validation split only (the evaluation
split is opened once, by the delivery itself). It writes one JSON result to `--out`.

    python -m tools.experiments.sft_chain.worker resume --checkpoint DIR ... --out result.json
    python -m tools.experiments.sft_chain.worker reload --adapter DIR ... --out result.json
    python -m tools.experiments.sft_chain.worker verify --checkpoint DIR --adapter DIR --merged DIR ... --out result.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.core.records import load_record
from tools.experiments.cli import add_common_arguments

VALIDATION = "validation"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments.sft_chain.worker")
    parser.add_argument("action", choices=("resume", "reload", "verify"))
    add_common_arguments(parser, ("model", "model_source", "device"), model={"required": True},
                         device={"default": "cpu"})
    parser.add_argument("--admitted", required=True, help="project 64's admitted data record")
    parser.add_argument("--admitted-sha256", required=True)
    parser.add_argument("--config", required=True, help="the TrainConfig as JSON")
    parser.add_argument("--checkpoint", help="resume: the checkpoint folder")
    parser.add_argument("--adapter", help="reload: the adapter folder (peft format)")
    parser.add_argument("--merged", help="verify: the merged export folder (optional)")
    parser.add_argument("--out", required=True)
    return parser


def run_action(args) -> dict:
    from tools.experiments.sft_chain import training

    config = training.TrainConfig.from_public(json.loads(args.config))
    admitted = load_record(args.admitted, expected_sha256=args.admitted_sha256)
    result = {}
    with training.one_thread_on_cpu(args.device):
        if args.action in ("resume", "verify"):
            model, tokenizer, _ = training.load_base(args.model, args.model_source, config.base, args.device)
            data = training.train_data(tokenizer, admitted["splits"]["train"])
            sets = {VALIDATION: [training.render_record(tokenizer, r) for r in admitted["splits"]["validation"]]}
            model = training.attach_adapter(model, config)
            resumed = training.train_run(model, tokenizer, data, sets, config, device=args.device,
                                         resume_from=Path(args.checkpoint))
            result["resumed"] = {key: resumed[key] for key in ("first_step", "losses", "learning_rates",
                                                               "optimiser_steps", "metrics", "adapter_sha256")}
        if args.action in ("reload", "verify"):
            from peft import PeftModel

            model, tokenizer, _ = training.load_base(args.model, args.model_source, config.base, args.device)
            sets = {VALIDATION: [training.render_record(tokenizer, r) for r in admitted["splits"]["validation"]]}
            model = PeftModel.from_pretrained(model, args.adapter)
            result["reloaded"] = training.base_metrics(model, tokenizer, sets, args.device)[VALIDATION]
        if args.action == "verify" and args.merged:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            with training.no_progress_bars():
                merged = AutoModelForCausalLM.from_pretrained(args.merged, dtype=training.TORCH_DTYPES[config.base])
            tokenizer = AutoTokenizer.from_pretrained(args.merged)
            sets = {VALIDATION: [training.render_record(tokenizer, r) for r in admitted["splits"]["validation"]]}
            result["merged"] = training.base_metrics(merged.to(args.device), tokenizer, sets, args.device)[VALIDATION]
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    result = run_action(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
