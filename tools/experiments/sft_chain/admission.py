"""Project 64 (SFT data admission): run every check on a delivery, merge, repair, hand the data down.

For each delivery line (`tools.data.sft_raw`): the frozen evaluation split is checked against its
pinned sha256 first (a changed evaluation split stops everything), then each version goes through

    per-sample checks     contract, verifier, over-length (tokens of the whole chat)
    per-split checks      duplicates and conflicts on normalised content
    leakage               `find_leaks` against every split of higher priority (evaluation first), run
                          twice: on the normalised text, and on each record's problem identity
                          (operation and operands, `sft_raw.problem_identity`), so the pipeline's own
                          paraphrases of an evaluation problem are leaks too
    merge                 `merge_blockers`: every finding into one verdict and a repair plan
    transition            `admission_transition`: accept hands off, tune repairs into a new version
                          (the repair plan's records dropped), reject returns the delivery

The three gate functions are arguments: the runner takes them from the plan's mechanism (the notebook
passes the learner's), else the library's (`admission_gates`). The runner writes four records:
`raw_data` (the deliveries as delivered; the frozen split only by its hash), `admitted_data` (the
admitted train and validation splits, read by 63 and 65), `evaluation_split` (the frozen evaluation
split, sealed: only project 62 opens it, `manifests.open_evaluation_split`) and the sealed `manifest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Mapping

from tools.core.handoff import seal
from tools.data import sft_raw
from tools.errors import ConfigError
from tools.experiments.sft_chain import admission_gates

CHAPTER_ID = "64"
SCHEMA = "sft-data-admission/v2"
MANIFEST_SCHEMA = "sft-data-admission-manifest/v2"
ADMITTED_SCHEMA = "sft-admitted-data/v2"
EVALUATION_SCHEMA = "sft-evaluation-split/v1"
RECORD_STAGES = ("raw_data", "admitted_data", "evaluation_split", "manifest")
LINES = sft_raw.LINES
MAIN_LINE = LINES[0]
GATE_NAMES = ("merge_blockers", "find_leaks", "admission_transition")
PRIORITY = ("evaluation", "validation", "train")
FROZEN = ("evaluation",)
MAX_DROP_FRACTION = 0.1
MIN_RECORDS = 20
MAX_REPAIRS = 2
MIN_TRAIN_RECORDS = 200
MAX_TRUNCATION_RATE = 0.02
NEXT_STEP = {"accept": "hand the admitted data to project 63 (LoRA variant selection) and project 65 (QLoRA branch)",
             "tune": "repair the delivery (drop the repair plan's records) and admit it again as a new version",
             "reject": "return the delivery to its owner with every blocker; a rejected version is never trained on"}

LIBRARY_GATES = SimpleNamespace(merge_blockers=admission_gates.merge_blockers, find_leaks=admission_gates.find_leaks,
                                admission_transition=admission_gates.admission_transition)


def gates_of(merge_blockers: Callable, find_leaks: Callable, admission_transition: Callable) -> SimpleNamespace:
    """The three gate functions as one argument (e.g. the notebook's own)."""
    return SimpleNamespace(merge_blockers=merge_blockers, find_leaks=find_leaks,
                           admission_transition=admission_transition)


def admission_tokenizer(run_mode: str, model: str, model_source: str):
    """The tokenizer whose lengths decide over-length: the model the chain trains. The lab models and
    random_init models use the tiny byte-level BPE; a real_gpu run from a local cache uses the cached
    tokenizer (only the tokenizer files are read)."""
    from transformers import AutoTokenizer

    from tools.models.loading import resolve_model

    if run_mode == "real_gpu" and model_source == "local" and model != "tiny":
        folder = resolve_model(model, "local")
        identity = {"tokenizer_of": model, "source": "local cache"}
    else:
        folder = resolve_model("tiny")
        identity = {"tokenizer_of": "tiny", "source": "built in code (the lab, tiny and random_init models share it)"}
    return AutoTokenizer.from_pretrained(folder), identity


def chat_length(tokenizer, record: Mapping) -> int:
    """Tokens of a record's whole chat (template, user turn, reply and its end-of-turn)."""
    messages = sft_raw.chat_messages(record) + [{"role": "assistant", "content": record["output"]}]
    ids = tokenizer.apply_chat_template(messages, tokenize=True)
    return len(list(getattr(ids, "input_ids", ids)))


def contract_problems(record) -> list[str]:
    """Field-contract problems of one record: not a dict, a missing or non-str field, an empty id,
    instruction or output (`system` and `input` may be empty)."""
    if not isinstance(record, dict):
        return ["not_a_mapping"]
    problems = [f"missing:{field}" for field in sft_raw.FIELDS if field not in record]
    problems += [f"type:{field}" for field in sft_raw.FIELDS if field in record and not isinstance(record[field], str)]
    problems += [f"empty:{field}" for field in ("instruction", "output", "id")
                 if isinstance(record.get(field), str) and not record[field].strip()]
    return problems


@dataclass
class Checked:
    """One version's findings and the numbers the manifest reports."""

    findings: list[dict]
    details: dict[str, dict[str, list[str]]]  # split -> sample id -> checks
    lengths: dict[str, dict[str, int]]
    truncation_rate: dict[str, float | None]
    leaks: dict
    contract: dict[str, dict[str, list[str]]]
    identity_leaks: dict


def identity_views(splits: Mapping[str, list]) -> dict[str, list[dict]]:
    """Each record as `find_leaks` reads it, with its problem identity as its content (a record whose
    problem cannot be read keeps its own text: it is compared as text only)."""
    views = {}
    for split, records in splits.items():
        views[split] = []
        for record in records:
            identity = sft_raw.problem_identity(record)
            views[split].append({"id": record["id"], "instruction": identity or sft_raw.content_key(record),
                                 "input": ""})
    return views


def check_version(splits: Mapping[str, list], tokenizer, find_leaks: Callable, max_length: int = sft_raw.MAX_LENGTH
                  ) -> Checked:
    """Every check on every record of every split; every finding kept (none hides another)."""
    findings, contract, lengths, usable = [], {}, {}, {}

    def note(check: str, split: str, sample_id: str) -> None:
        findings.append({"check": check, "split": split, "sample_id": sample_id})

    for split, records in splits.items():
        contract[split], lengths[split], usable[split] = {}, {}, []
        for index, record in enumerate(records):
            sample_id = record.get("id") if isinstance(record, dict) and isinstance(record.get("id"), str) \
                and record["id"].strip() else f"{split}#{index}"
            problems = contract_problems(record)
            if problems:
                contract[split][sample_id] = problems
                note("contract", split, sample_id)
                continue  # the checks below read the fields this record lacks
            usable[split].append(record)
            if not sft_raw.verify_answer(record):
                note("verifier", split, sample_id)
            lengths[split][sample_id] = chat_length(tokenizer, record)
            if lengths[split][sample_id] > max_length:
                note("over_length", split, sample_id)
        groups: dict[str, list[dict]] = {}
        for record in usable[split]:
            groups.setdefault(sft_raw.content_key(record), []).append(record)
        for members in groups.values():
            if len({sft_raw.normalise(member["output"]) for member in members}) > 1:
                for member in members:
                    note("conflict", split, member["id"])
            else:
                for member in members[1:]:
                    note("duplicate", split, member["id"])
    leaks = find_leaks(usable, list(PRIORITY))
    by_identity = find_leaks(identity_views(usable), list(PRIORITY))
    for split in usable:
        for sample_id in sorted(set(leaks["leaked"][split]) | set(by_identity["leaked"][split])):
            note("leakage", split, sample_id)
    details: dict[str, dict[str, list[str]]] = {split: {} for split in splits}
    for finding in findings:
        details[finding["split"]].setdefault(finding["sample_id"], []).append(finding["check"])
    truncation = {split: (sum(length > max_length for length in lengths[split].values()) / len(records)
                          if records else None) for split, records in splits.items()}
    return Checked(findings, details, lengths, truncation, leaks, contract, by_identity)


def check_frozen_evaluation(evaluation: list[dict]) -> str:
    """The evaluation split's sha256; ConfigError before any admission when it is not the pinned one."""
    actual = sft_raw.split_sha256(evaluation)
    if actual != sft_raw.FROZEN_EVALUATION_SHA256:
        raise ConfigError(f"the frozen evaluation split changed (sha256 {actual}, pinned "
                          f"{sft_raw.FROZEN_EVALUATION_SHA256}); an admission never runs against another one")
    return actual


def admit_line(delivery: sft_raw.Delivery, evaluation: list[dict], tokenizer, gates=LIBRARY_GATES) -> dict:
    """Admit a line version after version until it is accepted or rejected; every round kept."""
    rounds, history = [], []
    while True:
        splits = {"evaluation": evaluation, **delivery.splits}
        checked = check_version(splits, tokenizer, gates.find_leaks)
        merged = gates.merge_blockers(checked.findings, {name: len(records) for name, records in splits.items()},
                                      frozen=list(FROZEN), max_drop_fraction=MAX_DROP_FRACTION,
                                      min_records=MIN_RECORDS)
        admission = {"version": delivery.version, "content_sha256": delivery.sha256, "parent": delivery.parent,
                     "verdict": merged["verdict"]}
        transition = gates.admission_transition(history, admission, MAX_REPAIRS)
        rounds.append({"delivery": delivery, "checked": checked, "merged": merged, "transition": transition})
        if transition["state"] != "tune":
            return {"line": delivery.line, "rounds": rounds, "final": delivery, "state": transition["state"]}
        history = transition["history"]
        delivery = sft_raw.repaired(delivery, merged["repair"])


def run_admission(gates=LIBRARY_GATES, tokenizer=None, lines=LINES, seed: int = sft_raw.DELIVERY_SEED) -> dict:
    """Every line (drawn from `seed`) admitted with `gates`; the tokenizer defaults to the cpu_smoke one."""
    if tokenizer is None:
        tokenizer, _ = admission_tokenizer("cpu_smoke", "tiny", "local")
    evaluation = sft_raw.frozen_evaluation()
    check_frozen_evaluation(evaluation)
    return {"evaluation": evaluation, "seed": seed,
            "lines": {line: admit_line(sft_raw.build_delivery(line, seed), evaluation, tokenizer, gates)
                      for line in lines}}


# ---- what the records say ------------------------------------------------------------------------

def round_summary(item: Mapping) -> dict:
    """One admission round as plain data: identity, blockers, verdict, transition, figures."""
    delivery, checked, merged, transition = item["delivery"], item["checked"], item["merged"], item["transition"]
    return {"version": delivery.identity(), "verdict": merged["verdict"], "blockers": merged["blockers"],
            "repair": merged["repair"], "state": transition["state"], "reason": transition["reason"],
            "next_action": transition["next_action"], "truncation_rate": checked.truncation_rate,
            "overlap": checked.leaks["overlap"], "contract_problems": checked.contract,
            "findings_per_sample": checked.details}


def paraphrase_leaks(checked: Checked) -> dict[str, list[str]]:
    """The leaks only the problem identity found (the text of the two records differs): per split."""
    return {split: sorted(set(ids) - set(checked.leaks["leaked"][split]))
            for split, ids in checked.identity_leaks["leaked"].items()}


def manifest_gates(first_round: Mapping, final_round: Mapping) -> list[dict]:
    """The hand-off gates of the main line, each with threshold and measured value: truncation is
    measured on the delivery as received (after the repair it is 0 by construction), overlap on the
    final version by text and by problem identity."""
    delivery, checked = final_round["delivery"], final_round["checked"]
    overlap = sum(entry["shared"] for entry in checked.leaks["overlap"] + checked.identity_leaks["overlap"])
    train = len(delivery.splits["train"])
    truncation = first_round["checked"].truncation_rate["train"]
    return [
        {"name": "admission_state", "threshold": "accept", "measured": final_round["transition"]["state"],
         "passed": final_round["transition"]["state"] == "accept"},
        {"name": "frozen_evaluation_sha256", "threshold": sft_raw.FROZEN_EVALUATION_SHA256,
         "measured": sft_raw.split_sha256(sft_raw.frozen_evaluation()),
         "passed": sft_raw.split_sha256(sft_raw.frozen_evaluation()) == sft_raw.FROZEN_EVALUATION_SHA256},
        {"name": "valid_train_records", "threshold": MIN_TRAIN_RECORDS, "measured": train,
         "passed": train >= MIN_TRAIN_RECORDS},
        {"name": "truncation_rate_delivered", "threshold": MAX_TRUNCATION_RATE, "measured": truncation,
         "passed": truncation is not None and truncation <= MAX_TRUNCATION_RATE},
        {"name": "cross_split_overlap", "threshold": 0, "measured": overlap, "passed": overlap == 0},
    ]


def decision_of(gates: list[dict], state: str) -> dict:
    failed = [gate["name"] for gate in gates if not gate["passed"]]
    decision = "accept" if not failed else (state if state in ("tune", "reject") else "reject")
    return {"decision": decision, "reasons": failed, "gates_passed": len(gates) - len(failed), "gates": len(gates)}


def raw_data_body(result: Mapping, tokenizer_identity: Mapping) -> dict:
    lines = {name: line["rounds"][0]["delivery"] for name, line in result["lines"].items()}
    return {"builder": sft_raw.RAW_DATA_VERSION, "comparability": sft_raw.COMPARABILITY_NOTE,
            "normalisation": sft_raw.NORMALISATION, "tokenizer": dict(tokenizer_identity),
            "max_length": sft_raw.MAX_LENGTH,
            "frozen_evaluation": {"sha256": sft_raw.split_sha256(result["evaluation"]),
                                  "record_count": len(result["evaluation"]),
                                  "where": "the sealed evaluation_split record (opened by project 62 only)"},
            "deliveries": {name: {"identity": delivery.identity(), "splits": delivery.splits, "planted": delivery.planted}
                           for name, delivery in lines.items()}}


def admitted_body(final: sft_raw.Delivery, evaluation: list[dict]) -> dict:
    return {"version": final.identity(), "comparability": sft_raw.COMPARABILITY_NOTE,
            "splits": final.splits,
            "sample_ids": {name: [record["id"] for record in records] for name, records in final.splits.items()},
            "evaluation_sha256": sft_raw.split_sha256(evaluation), "evaluation_records": len(evaluation)}


def evaluation_body(evaluation: list[dict]) -> dict:
    """The frozen evaluation split as its own record: sealed when written, opened by 62 only."""
    return {"comparability": sft_raw.COMPARABILITY_NOTE, "task": sft_raw.TASK, "records": evaluation,
            "sha256": sft_raw.split_sha256(evaluation), "openers": ["62"],
            "rule": "selection reads the validation split; this split is opened once, by project 62, for the final "
                    "report, and every opening is recorded"}


def manifest_body(result: Mapping, inputs: list[dict], outputs: list[dict]) -> dict:
    main = result["lines"][MAIN_LINE]
    final_round = main["rounds"][-1]
    gates = manifest_gates(main["rounds"][0], final_round)
    decision = decision_of(gates, main["state"])
    final = main["final"]
    return {
        "comparability": sft_raw.COMPARABILITY_NOTE,
        "inputs": inputs,
        "candidates": [{"line": name, **round_summary(item)} for name, line in result["lines"].items()
                       for item in line["rounds"]],
        "gates": gates,
        "decision": {**decision, "line": MAIN_LINE, "version": final.version, "content_sha256": final.sha256},
        "next_action": NEXT_STEP[decision["decision"]],
        "outputs": outputs,
        "admitted": {"version": final.identity(), "evaluation_sha256": sft_raw.split_sha256(result["evaluation"]),
                     "evaluation_records": len(result["evaluation"]),
                     "sample_ids": {name: [record["id"] for record in records] for name, records in final.splits.items()}},
        "paraphrase_leaks": paraphrase_leaks(main["rounds"][0]["checked"]),
        "lines": {name: {"state": line["state"], "rounds": len(line["rounds"]), "final_version": line["final"].version}
                  for name, line in result["lines"].items()},
    }


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner: admit every line, then write raw_data, admitted_data, manifest."""
    say = log or (lambda message: None)
    if not plan.writes:
        say(f"sft_data_admission (dry_run): would admit the lines {', '.join(LINES)} against the frozen evaluation "
            f"split (sha256 {sft_raw.FROZEN_EVALUATION_SHA256[:12]}), then write {', '.join(RECORD_STAGES)} under "
            "the project's results folder; nothing is read, loaded or written")
        return
    sink.require_new(RECORD_STAGES)
    gates = gates_of(*(plan.mechanism.function(name, getattr(LIBRARY_GATES, name)) for name in GATE_NAMES))
    mechanism = plan.mechanism.describe({name: getattr(LIBRARY_GATES, name) for name in GATE_NAMES})
    tokenizer, identity = admission_tokenizer(plan.run_mode, plan.model, plan.model_source)
    result = run_admission(gates, tokenizer)
    main = result["lines"][MAIN_LINE]
    raw_path, _ = sink.save_record("raw_data", {**raw_data_body(result, identity), "mechanism": mechanism},
                                   schema_version=SCHEMA)
    outputs = []
    if main["state"] == "accept":
        admitted_path, _ = sink.save_record("admitted_data", admitted_body(main["final"], result["evaluation"]),
                                            schema_version=ADMITTED_SCHEMA)
        evaluation_path = sink.record_path("evaluation_split")
        sink.save(evaluation_path, seal({**sink.header("evaluation_split", EVALUATION_SCHEMA),
                                         **evaluation_body(result["evaluation"])}), stage="evaluation_split")
        outputs = [{"role": "admitted_data", **sink.lineage(admitted_path)},
                   {"role": "evaluation_split", **sink.lineage(evaluation_path)}]
    inputs = [{"role": "raw_data", **sink.lineage(raw_path)}]
    ref = _write(sink, {**manifest_body(result, inputs, outputs), "mechanism": mechanism})
    say(f"64 admission: {MAIN_LINE} -> {main['state']} after {len(main['rounds'])} round(s); manifest {ref.path.name} "
        f"sha256 {ref.sha256[:12]}")


def _write(sink, body: Mapping[str, Any]):
    from tools.experiments.sft_chain.manifests import write_manifest

    return write_manifest(sink, body, schema_version=MANIFEST_SCHEMA)
