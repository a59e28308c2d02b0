"""Step 5 of the two verl chapters: PT-ROLLOUT-LIFECYCLE runs the shared experiment, PT-RL-SYSTEM reads
the same record. Both call this module, so neither notebook repeats the other's code.

    plan_closure(...)          the run parameters checked; the shared record's path and the tool's arguments
    run_or_read(plan)          dry_run: the tool's preflight of both plans; else read the record of this
                               label, or run the experiment once when there is none
    lifecycle_* / system_*     what each page prints and the sentences it reads, built from record fields
    recheck_admissions(...)    the lifecycle page's recomputation with the chapter's own functions
    draw_drift / draw_timeline the two figures
    evidence_beside_reported   the learner's own run beside what the original course reported

Silent unless a caller passes `echo` (the notebooks pass `print`). The experiment runs as a separate
process (`python -m tools.experiments.verl_closure`), as on a GPU machine, so its memory is its own.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tools.chapters.evidence import reported_block
from tools.core.paths import default_results_dir, resolve_project_root, results_root_for
from tools.core.records import lineage_entry, load_record, sha256_file
from tools.core.runs import validate_choice, validate_run_label, validate_run_mode
from tools.errors import ConfigError, StageFailedError, UpstreamRecordError
from tools.experiments.verl_closure.config import BACKENDS, MODEL_SOURCES
from tools.experiments.verl_closure.record import SCHEMA, read_summary

CLOSURE_FOLDER = "pt_verl_closure"
"""One shared record per label: `<results dir>/pt_verl_closure/<label>.json`."""

TOOL_MODULE = "tools.experiments.verl_closure"
STAGE = "verl_mechanism_closure"
PREVIEW_LABEL = "dry_run_preview"

PREFLIGHT_MEANING = {
    0: "ready (exit 0): every check passed. A ready environment is not a passed experiment.",
    2: "invalid arguments (exit 2): nothing was checked; fix the parameters above.",
    3: "blocked (exit 3): fix the checks marked !! above first; nothing was run or written.",
    4: ("only the model cache is missing (exit 4); every other check passed. Download the model with the "
        "command listed above, or set MODEL_SOURCE = 'random_init' (the record then says weights: random_init)."),
}
RUN_FAILURE_MEANING = {
    1: "a stage failed and no record was written",
    2: "invalid input; nothing was done",
    3: "the preflight blocked the run; nothing was done",
    4: "the model cache is missing: download the model or set MODEL_SOURCE = 'random_init'",
}

Echo = Callable[[str], None] | None


def _say(echo: Echo, line: str = "") -> None:
    if echo is not None:
        echo(line)


# ---------------------------------------------------------------------------
# The plan: paths and arguments
# ---------------------------------------------------------------------------

def closure_record_path(run_mode: str, run_label: str, results_dir=None, root: Path | None = None) -> Path:
    """`<results dir>/pt_verl_closure/<label>.json`; RESULTS_DIR wins over the run mode's default folder."""
    if validate_run_mode(run_mode) == "dry_run":
        raise ConfigError("dry_run has no shared record; plan a cpu_smoke or real_gpu run.")
    return results_root_for(run_mode, results_dir, root) / CLOSURE_FOLDER / f"{run_label}.json"


@dataclass(frozen=True)
class ClosurePlan:
    """One page's Step 5: the run parameters, checked, and where the shared record goes (None in dry_run)."""

    run_mode: str
    run_label: str
    results_dir: Any
    backend: str
    model_source: str
    verl_root: Path | None
    path: Path | None

    def arguments(self, run_mode: str) -> list[str]:
        """What the tool is asked for in `run_mode`: the tiny model through the torch backend on CPU
        (cpu_smoke, a code-path proof), or Qwen2.5-0.5B-Instruct on CUDA (real_gpu)."""
        if run_mode == "cpu_smoke":
            return ["--backend", "torch", "--model", "tiny", "--device", "cpu"]
        return (["--backend", self.backend, "--device", "cuda", "--model-source", self.model_source]
                + (["--verl-root", str(self.verl_root)] if self.verl_root else []))

    def describe(self) -> str:
        lines = [f"RUN_MODE = {self.run_mode}, RUN_LABEL = {self.run_label!r}"]
        if self.path is None:
            lines.append("shared record: none in dry_run (the next cell runs the preflight only and writes nothing)")
            return "\n".join(lines)
        lines += [f"shared record: {self.path}", "experiment arguments: " + shlex.join(self.arguments(self.run_mode))]
        if self.run_mode == "cpu_smoke":
            lines.append("cpu_smoke uses the tiny model on CPU; CLOSURE_BACKEND, MODEL_SOURCE and VERL_ROOT apply "
                         "to real_gpu only")
        return "\n".join(lines)


def plan_closure(run_mode: str, run_label: str, results_dir=None, *, backend: str = "verl",
                 model_source: str = "local", verl_root=None, root: Path | None = None) -> ClosurePlan:
    """Check a page's Step 5 parameters before any work and derive the shared record's path."""
    run_mode = validate_run_mode(run_mode)
    validate_choice("CLOSURE_BACKEND", backend, BACKENDS)
    validate_choice("MODEL_SOURCE", model_source, MODEL_SOURCES)
    folder = Path(verl_root).expanduser() if verl_root else None
    if folder is not None and not folder.is_dir():
        raise ConfigError(f"VERL_ROOT {folder} is not a folder: point it at a verl 0.9.1 checkout or set None")
    path = None
    if run_mode != "dry_run":
        run_label = validate_run_label(run_label)
        path = closure_record_path(run_mode, run_label, results_dir, root)
    return ClosurePlan(run_mode, run_label, results_dir, backend, model_source, folder, path)


# ---------------------------------------------------------------------------
# Running the tool, reading the record
# ---------------------------------------------------------------------------

def run_closure_tool(mode: str, label: str, output: Path, arguments: list[str], *, echo: Echo = None,
                     root: Path | None = None) -> int:
    """Run `python -m tools.experiments.verl_closure` from the project root; pass each line of its output
    to `echo`; return its exit code."""
    command = [sys.executable, "-m", TOOL_MODULE, "--mode", mode, "--run-label", label, "--output", str(output),
               *arguments]
    _say(echo, "$ python " + shlex.join(command[1:]))
    with subprocess.Popen(command, cwd=root or resolve_project_root(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace") as process:
        for line in process.stdout:
            _say(echo, line.rstrip("\n"))
    return process.returncode


def read_closure_record(path: Path, label: str, run_mode: str) -> dict:
    """The shared record at `path`; refused when its schema, its label or its evidence level does not fit."""
    record = load_record(path, schema_version=SCHEMA)
    if record.get("run_label") != label:
        raise UpstreamRecordError(f"{path} holds run label {record.get('run_label')!r}, not {label!r}.",
                                  stage=STAGE, fix="choose another RUN_LABEL, or RESULTS_DIR")
    if run_mode == "real_gpu" and record.get("evidence_level") != "real_gpu":
        raise UpstreamRecordError(
            f"{path} is {record.get('evidence_level')!r} evidence; a real_gpu run never reads it as a GPU result.",
            stage=STAGE, fix="choose a new RUN_LABEL for the GPU run")
    return record


@dataclass(frozen=True)
class SharedRecord:
    """The shared record a page uses: where, whether this page ran or read it, its sha256 and content."""

    path: Path
    origin: str
    sha256: str
    record: Mapping[str, Any]

    def summary(self, page: str) -> dict:
        return read_summary(self.path, page)


def preflight_plans(plan: ClosurePlan, *, echo: Echo = None, root: Path | None = None) -> dict[str, int]:
    """dry_run: the tool's preflight of the real_gpu and the cpu_smoke plan (loads no model, writes
    nothing); returns each plan's exit code (None where a record of the label already exists)."""
    try:
        label = validate_run_label(plan.run_label)
    except ConfigError as error:
        label = None
        _say(echo, f"{error}\nThe preflight below uses a stand-in label and a scratch output path.")
    codes = {}
    for planned in ("real_gpu", "cpu_smoke"):
        _say(echo, f"\n--- preflight of the {planned} plan (loads no model, writes nothing) ---")
        if label is None:
            this_label, output = PREVIEW_LABEL, Path(tempfile.gettempdir()) / CLOSURE_FOLDER / f"{PREVIEW_LABEL}.json"
        else:
            this_label, output = label, closure_record_path(planned, label, plan.results_dir, root)
        if output.exists():
            _say(echo, f"a record with this label already exists at {output}: RUN_MODE = {planned!r} reads it and "
                       "does not run the experiment again.")
            codes[planned] = None
            continue
        code = run_closure_tool("preflight", this_label, output, plan.arguments(planned), echo=echo, root=root)
        codes[planned] = code
        _say(echo, f"=> {planned}: " + PREFLIGHT_MEANING.get(code, f"unexpected exit code {code}; read the output above."))
        if code == 0:
            _say(echo, f"   Set RUN_MODE = {planned!r} (and a unique RUN_LABEL) to run it.")
        elif planned == "real_gpu" and code == 3:
            _say(echo, "   Without a GPU, RUN_MODE = 'cpu_smoke' runs the same code path with the tiny model on CPU.")
    return codes


def obtain_closure_record(plan: ClosurePlan, *, echo: Echo = None, root: Path | None = None) -> SharedRecord:
    """Read the shared record of this label, or run the experiment once when there is none.

    A record of another label, of another schema, or (in real_gpu) of cpu_smoke evidence is refused
    (UpstreamRecordError); a failed run raises StageFailedError with the exit code and the group logs.
    """
    if plan.path is None:
        raise ConfigError("dry_run reads and runs nothing; call preflight_plans instead.")
    if plan.path.exists():
        read_closure_record(plan.path, plan.run_label, plan.run_mode)
        origin = "read"
        _say(echo, f"The shared record of label {plan.run_label!r} already exists: it is read, and the experiment "
                   "is not run again.")
    else:
        _say(echo, f"No shared record of label {plan.run_label!r} yet: running the experiment once ({plan.run_mode}).")
        code = run_closure_tool("run", plan.run_label, plan.path, plan.arguments(plan.run_mode), echo=echo, root=root)
        if code != 0:
            logs = [str(plan.path.parent / f"{plan.run_label}_{group}.log") for group in ("release", "retain")]
            logs = [log for log in logs if Path(log).exists()]
            raise StageFailedError(
                f"the shared experiment exited with code {code} ({RUN_FAILURE_MEANING.get(code, 'unexpected exit code')})",
                stage=STAGE, cause=f"exit code {code}",
                fix="read the output above" + (f" and the group logs {logs}" if logs else "")
                    + "; fix the cause before running again")
        origin = "ran"
    record = read_closure_record(plan.path, plan.run_label, plan.run_mode)
    shared = SharedRecord(plan.path, origin, sha256_file(plan.path), record)
    _say(echo, f"shared record ({origin}): {plan.path}")
    _say(echo, f"  sha256 {shared.sha256}")
    _say(echo, f"  schema {record['schema_version']}, evidence level {record['evidence_level']}, backend "
               f"{record['backend']}, device {record['device']}, model {record['model'].get('model_id')} "
               f"(weights {record['model'].get('weights')}), status {record['system_decision']['status']}")
    return shared


def run_or_read(plan: ClosurePlan, *, echo: Echo = None, root: Path | None = None) -> SharedRecord | None:
    """Step 5's one call: the preflight in dry_run (returns None), else `obtain_closure_record`."""
    if plan.run_mode == "dry_run":
        preflight_plans(plan, echo=echo, root=root)
        return None
    return obtain_closure_record(plan, echo=echo, root=root)


# ---------------------------------------------------------------------------
# What the pages print
# ---------------------------------------------------------------------------

def _value(value, digits: int = 1) -> str:
    """A sampled number, or null when nothing was sampled (never 0)."""
    return "null" if value is None else f"{value:.{digits}f}"


def _header(summary: Mapping[str, Any]) -> str:
    return (f"label {summary['run_label']} | evidence {summary['evidence_level']} | backend {summary['backend']} | "
            f"model {summary['model_id']} (weights {summary['weights']}) | status {summary['status']}")


def _checks(summary: Mapping[str, Any]) -> list[str]:
    return ["checks:"] + [f"  {'pass' if ok else 'FAIL'}  {name}" for name, ok in summary["checks"].items()]


def lifecycle_table(summary: Mapping[str, Any]) -> str:
    """The lifecycle page's view of the record: identity, versions, agreement, admission."""
    frozen, limits = summary["frozen_rollouts"], summary["same_version_limits"]
    lines = [_header(summary), f"tasks {summary['task_version']}, pool sha256 {summary['pool_sha256'][:16]}...",
             f"frozen rollouts: {frozen['count']} at policy version {frozen['policy_version']}, sha256 "
             f"{frozen['sha256'][:16]}..., temperature {frozen['temperature']}, seed {frozen['seed']}, response cap "
             f"{frozen['response_token_cap']} tokens; parsed {frozen['parsed']}, correct {frozen['correct']}, "
             f"finish reasons {frozen['finish_reasons']}",
             f"limits: same-version mean |error| <= {limits['mean_abs']}, p99 |error| <= {limits['p99_abs']}; "
             f"behaviour drift <= {summary['behaviour_drift_threshold']}", "", *_checks(summary)]
    rows = [("initial LoRA sha256", lambda g: g["initial_lora_sha256"][:16]),
            ("updated LoRA sha256", lambda g: g["updated_lora_sha256"][:16]),
            ("changed tensors", lambda g: f"{g['changed_tensor_count']}/{g['lora_tensor_count']}"),
            ("versions frozen/trainer/engine", lambda g: "{frozen}/{trainer_after_update}/{engine_after_sync}"
             .format(**g["policy_version"])),
            ("engine reported (gen / sync)", lambda g: "{generation}/{post_sync_generation}"
             .format(**g["engine_reported_versions"])),
            ("before update mean/p99/max", lambda g: _agreement(g["same_version_before_update"])),
            ("after sync mean/p99/max", lambda g: _agreement(g["same_version_after_sync"])),
            ("admitted / rejected", lambda g: f"{g['admitted']} / {g['rejected']}"),
            ("update loss", lambda g: "null" if g["update_loss"] is None else f"{g['update_loss']:.4f}")]
    groups = summary["groups"]
    lines += ["", f"{'':<32}" + "".join(f"{name:>30}" for name in groups)]
    lines += [f"{label:<32}" + "".join(f"{getter(entry)!s:>30}" for entry in groups.values()) for label, getter in rows]
    comparison = summary["updated_lora_comparison"]
    lines.append(f"updated LoRA, release vs retain: relative difference {_value(comparison['relative_difference'], 4)} "
                 f"(tolerance {comparison['tolerance']}), bit-identical {comparison['bit_identical']}")
    return "\n".join(lines)


def _agreement(entry: Mapping[str, float]) -> str:
    return f"{entry['mean_abs_error']:.3g}/{entry['p99_abs_error']:.3g}/{entry['max_abs_error']:.3g}"


def system_table(summary: Mapping[str, Any]) -> str:
    """The system page's view: sampler, peaks, per-phase timing and peaks, engine state events."""
    sampler, settling = summary["sampler"], summary["memory_settling"]
    lines = [_header(summary), "", *_checks(summary), "",
             f"sampler: every {sampler['interval_s']} s, {sampler['sample_count']} samples, GPU source "
             f"{sampler['gpu_source']} ({sampler.get('gpu_mapping') or 'no device'}), host source {sampler['host_source']}",
             "whole-segment sampled peaks (MiB): GPU " + ", ".join(
                 f"{k} {_value(v)}" for k, v in summary["sampled_gpu_peak_mb"].items()) + " | host " + ", ".join(
                 f"{k} {_value(v)}" for k, v in summary["sampled_host_peak_mb"].items()),
             f"device memory between groups: baseline {_value(settling['baseline_mb'])} MiB, "
             + "; ".join(f"before {group}: settled {entry.get('settled')}" for group, entry in
                         settling["before_group"].items())]
    for group, entry in summary["groups"].items():
        lines += ["", f"{group}: free_cache_engine={entry['free_cache_engine']}, release calls {entry['release_calls']}, "
                      f"resume calls {entry['resume_calls']}, initialisation {entry['initialisation_s']:.3f} s, "
                      f"step {entry['step_s']:.3f} s",
                  f"  {'phase':<22}{'seconds':>9}{'samples':>9}{'GPU peak MiB':>14}{'host peak MiB':>15}"]
        lines += [f"  {phase:<22}{value['duration_s']:>9.3f}{value['sample_count']:>9}"
                  f"{_value(value['gpu_peak_mb']):>14}{_value(value['host_peak_mb']):>15}"
                  for phase, value in entry["phases"].items()]
    lines += ["", "engine state events:"]
    lines += [f"  {e['group']:<8}{e['event']:<16}{e['call']:<42}tags={e['tags']}  t={e['start_s']:.3f}-{e['end_s']:.3f} s"
              for e in summary["worker_events"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Sentences from the record's own fields
# ---------------------------------------------------------------------------

def evidence_sentence(summary: Mapping[str, Any]) -> str:
    """What the record may stand for, built from its own fields."""
    source = f"后端 `{summary['backend']}`、模型 `{summary['model_id']}`（权重 `{summary['weights']}`）"
    if summary["evidence_level"] == "cpu_smoke":
        return (f"证据级别 `cpu_smoke`：这条记录由 {source} 在 CPU 上生成，只证明实验代码从头到尾走得通；"
                "其中的耗时、内存和概率数值都不是 GPU 结果，不能拿来说明显存占用或速度。")
    sentence = f"证据级别 `{summary['evidence_level']}`：{source} 在 GPU 上完成的一次配对运行。"
    if summary["weights"] == "random_init":
        sentence += "权重是随机初始化的：阶段、内存与耗时是真实观测，生成内容和正确率没有意义。"
    return sentence


def _checks_sentence(summary: Mapping[str, Any]) -> str:
    checks, failed = summary["checks"], summary["failed_checks"]
    return (f"检查：{len(checks) - len(failed)}/{len(checks)} 项通过，状态 `{summary['status']}`"
            + ("。" if not failed else "；未通过：" + "、".join(f"`{name}`" for name in failed) + "。"))


def lifecycle_sentences(summary: Mapping[str, Any]) -> list[str]:
    """The lifecycle page's interpretation, one sentence per fact, every number from the record."""
    checks, groups, frozen = summary["checks"], summary["groups"], summary["frozen_rollouts"]
    limits = summary["same_version_limits"]

    def verdict(entry):
        ok = entry["mean_abs_error"] <= limits["mean_abs"] and entry["p99_abs_error"] <= limits["p99_abs"]
        return (f"均值 {entry['mean_abs_error']:.3g}、p99 {entry['p99_abs_error']:.3g}（{'都在' if ok else '超出'}上限"
                f" {limits['mean_abs']:g} / {limits['p99_abs']:g} 之内{'' if ok else '之外'}），最大值 "
                f"{entry['max_abs_error']:.3g} 只记录不判定")

    lines = [evidence_sentence(summary), _checks_sentence(summary),
             f"身份：{frozen['count']} 条冻结轨迹在策略版本 {frozen['policy_version']} 上采样（哈希 `{frozen['sha256'][:12]}…`），"
             + ("两组重评的是同一批轨迹。" if checks["frozen_rollouts_shared"] else "两组重评的轨迹并不相同，重评结论不能直接比较。")]
    for group, entry in groups.items():
        lines.append(f"`{group}` 组同版本核对（{entry['same_version_before_update']['token_count']} 个 token）：更新前"
                     f"学习器重算与行为对数概率之差 {verdict(entry['same_version_before_update'])}；同步后引擎与学习器之差 "
                     f"{verdict(entry['same_version_after_sync'])}。")
    initial = {entry["initial_lora_sha256"] for entry in groups.values()}
    updated = {entry["updated_lora_sha256"] for entry in groups.values()}
    comparison = summary["updated_lora_comparison"]
    tensors = ", ".join(f"`{g}` {e['changed_tensor_count']}/{e['lora_tensor_count']}" for g, e in groups.items())
    relative = comparison["relative_difference"]
    closeness = ("逐位相同" if comparison["bit_identical"] else
                 f"不逐位相同，相对差 {_value(relative, 4)}（容差 {comparison['tolerance']:g}，"
                 f"{'在容差内' if relative is not None and relative <= comparison['tolerance'] else '超出容差'}）")
    lines.append(f"参数：改变的 LoRA 张量数 {tensors}；两组初始哈希{'相同' if len(initial) == 1 else '不同（配对失败）'}，"
                 f"更新{'确实' if initial.isdisjoint(updated) else '没有'}改变了哈希；两组更新后的 LoRA {closeness}。")
    kinds = Counter("lora_A" if "lora_A" in name else "lora_B" if "lora_B" in name else "other"
                    for entry in groups.values() for name in entry["changed_tensors"])
    if kinds and set(kinds) == {"lora_B"}:
        lines.append("改变的张量全部是 `lora_B`：LoRA 的 B 矩阵初始为零，第一次更新时 A 收到的梯度也是零，"
                     "所以一次更新只改变 B。这是初始化方式的结果，不是更新失败。")
    elif kinds:
        lines.append("改变的张量按类型计数：" + ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) + "。")
    for group, entry in groups.items():
        versions, reported = entry["policy_version"], entry["engine_reported_versions"]
        lags = sorted({d["version_lag"] for d in entry["admission_decisions"]})
        lines.append(f"`{group}` 组版本：冻结轨迹 v{versions['frozen']} → 更新后学习器 v{versions['trainer_after_update']} "
                     f"→ 同步后引擎 v{versions['engine_after_sync']}；引擎自己在输出里报告的版本：生成时 "
                     f"{reported['generation']}、同步后 {reported['post_sync_generation']}；重评时的版本差 "
                     f"{', '.join(map(str, lags))}。")
    admitted = ", ".join(f"`{g}` {e['admitted']} 条准入、{e['rejected']} 条拒绝" for g, e in groups.items())
    lines.append(f"重评与准入（行为偏离阈值 {summary['behaviour_drift_threshold']:g}）：{admitted}。")
    if frozen["parsed"] == 0:
        lines.append("冻结轨迹没有一条能解析出整数答案：这是采样记录，不是质量评测（微型或随机权重模型下这是预期的）。")
    else:
        lines.append(f"冻结轨迹中 {frozen['parsed']} 条可解析、{frozen['correct']} 条正确、{frozen['truncated']} 条截断；"
                     "这是采样记录，不是质量评测。")
    lines.append("这条单卡记录推不出：多个消费者并发领取时的原子性、多工作进程下的原子激活、真实异步队列里的陈旧轨迹。")
    return lines


def system_sentences(summary: Mapping[str, Any]) -> list[str]:
    """The system page's interpretation, one sentence per fact, every number from the record."""
    checks = summary["checks"]
    gpu_sampled = summary["sampler"]["gpu_source"] is not None
    peak_key, memory = ("gpu_peak_mb", "整卡显存") if gpu_sampled else ("host_peak_mb", "整机主机内存")
    whole_run = summary["sampled_gpu_peak_mb"] if gpu_sampled else summary["sampled_host_peak_mb"]

    def mib(value):
        return "null（没有采样点）" if value is None else f"{value:.0f} MiB"

    lines = [evidence_sentence(summary)]
    if not gpu_sampled:
        lines.append("这次运行没有 GPU 可采，下面的内存一律是整机主机内存；GPU 峰值全部为 null，不是 0。")
    lines.append(_checks_sentence(summary))
    hashes = {entry["initial_lora_sha256"] for entry in summary["groups"].values()}
    if len(hashes) == 1:
        lines.append(f"两组从同一份初始 LoRA 出发（哈希 `{next(iter(hashes))[:12]}…`），配置只差 `free_cache_engine`，"
                     "差异可以归因于这个开关。" if checks["config_differs_only_in_free_cache_engine"]
                     else "两组初始 LoRA 哈希相同，但配置差异不止 `free_cache_engine`，不能把差异归因于这个开关。")
    else:
        lines.append("两组初始 LoRA 哈希不同：这是一次配对失败，阶段观测可以保留，差异不能归因于引擎释放开关。")
    release = summary["engine_description"].get("release")
    for group, entry in summary["groups"].items():
        calls = sorted({e["call"] for e in summary["worker_events"]
                        if e["group"] == group and e["event"] in ("engine_release", "engine_resume")})
        lines.append(f"`{group}` 组（free_cache_engine={entry['free_cache_engine']}）：释放 {entry['release_calls']} 次、"
                     f"恢复 {entry['resume_calls']} 次" + (f"，实际调用 {', '.join(calls)}。" if calls else "，没有任何释放或恢复调用。"))
    if release:
        lines.append(f"这个后端的“释放”具体做的是：{release}。")
    settling = summary["memory_settling"]
    if settling["measured"]:
        waits = "；".join(f"`{g}` 组开始前等待 {e['waited_s']:.1f} s，读数 {e['last_mb']:.0f} MiB，"
                         f"{'回到' if e['settled'] else '没有回到'}基线 + {settling['margin_mb']:.0f} MiB 以内"
                         for g, e in settling["before_group"].items())
        lines.append(f"组间显存：第一组开始前的基线 {settling['baseline_mb']:.0f} MiB；{waits}。")
    else:
        lines.append("组间显存：这次运行没有可读的设备显存，组与组之间没有等待（记录为 null，不是 0）。")
    compilation = summary.get("compilation")
    if compilation:
        lines.append(f"编译设置（记录原文）：{compilation}；启动时间里不含编译和 CUDA Graph 捕获。")
    for group, entry in summary["groups"].items():
        update = entry["phases"]["update"]
        lines.append(f"`{group}` 组更新阶段：{update['duration_s']:.3f} s，{update['sample_count']} 个采样点，"
                     f"{memory}采样峰值 {mib(update[peak_key])}。")
    for group, entry in summary["groups"].items():
        at_peak = [phase for phase, value in entry["phases"].items()
                   if whole_run[group] is not None and value[peak_key] == whole_run[group]]
        where = ("" if whole_run[group] is None else "，出现在 " + "、".join(f"`{p}`" for p in at_peak) + " 阶段"
                 if at_peak else "，落在两个阶段之间的间隙里（不属于任何阶段）")
        lines.append(f"`{group}` 组整段{memory}峰值 {mib(whole_run[group])}{where}；它和更新阶段的峰值分开报告，不能互相替代。")
    unsampled = {group: [phase for phase, value in entry["phases"].items() if value["sample_count"] == 0]
                 for group, entry in summary["groups"].items()}
    lines.append("没有落到采样点、峰值记为 null 的阶段：" + "；".join(
        f"`{group}` 组 " + (", ".join(phases) if phases else "无") for group, phases in unsampled.items()) + "。")
    lines.append("记录自带的解释边界：" + "; ".join(summary["interpretation_limits"]) + "。")
    return lines


# ---------------------------------------------------------------------------
# The lifecycle page's recomputation with the chapter's own functions
# ---------------------------------------------------------------------------

def recheck_admissions(summary: Mapping[str, Any], check_freshness: Callable, advance_state: Callable, *,
                       max_version_lag: int = 1) -> dict:
    """Recompute every admission of the record with the chapter's `check_rollout_freshness` and
    `advance_rollout_state` (sampled -> scored -> admitted | rejected), and compare with the tool's.

    `max_version_lag` is 1: the experiment takes exactly one update between sampling and re-scoring.
    Returns `{inputs, groups: {group: {admitted, rejected, agreeing, total, record_admitted,
    record_rejected, verdicts}}, consistent}`.
    """
    drift_limit = summary["behaviour_drift_threshold"]
    groups = {}
    for group, entry in summary["groups"].items():
        version = entry["policy_version"]["trainer_after_update"]
        states, agree, verdicts = Counter(), 0, []
        for rollout, current, decision in zip(summary["rollouts"], entry["rescored_after_update"],
                                              entry["admission_decisions"], strict=True):
            fresh = check_freshness(rollout, version, current, max_version_lag=max_version_lag, max_drift=drift_limit)
            item = {"rollout_id": rollout["rollout_id"], "state": "sampled",
                    "policy_version": rollout["policy_version"], "history": ["sampled"]}
            item = advance_state(item, {"type": "score", "scored_version": version})
            item = advance_state(item, {"type": "admit"} if fresh["admitted"]
                                 else {"type": "reject", "reason": ", ".join(fresh["reasons"])})
            states[item["state"]] += 1
            agree += item["state"] == decision["state"] and item["rollout_id"] == decision["rollout_id"]
            verdicts.append({"rollout_id": item["rollout_id"], "state": item["state"],
                             "version_lag": fresh["version_lag"], "behaviour_drift": fresh["behaviour_drift"],
                             "reasons": fresh["reasons"], "record_state": decision["state"]})
        groups[group] = {"admitted": states["admitted"], "rejected": states["rejected"], "agreeing": agree,
                         "total": len(verdicts), "record_admitted": entry["admitted"],
                         "record_rejected": entry["rejected"], "verdicts": verdicts}
    return {"inputs": {"behaviour_drift_threshold": drift_limit, "max_version_lag": max_version_lag},
            "groups": groups, "consistent": all(g["agreeing"] == g["total"] for g in groups.values())}


def recheck_sentence(recheck: Mapping[str, Any]) -> str:
    return "用本章参考实现重算：" + "；".join(
        f"`{group}` {g['admitted']} 条准入、{g['rejected']} 条拒绝，逐条与记录一致 {g['agreeing']}/{g['total']}"
        for group, g in recheck["groups"].items()) + "。"


def recheck_record_body(shared: SharedRecord, recheck: Mapping[str, Any]) -> dict:
    """The body of the lifecycle page's record: lineage to the shared record and the recomputation."""
    return {
        "measurement": ("none: a recomputation of the shared verl record's admissions with this chapter's reference "
                        "functions; the measurements and their evidence level are the shared record's"),
        "inputs": {"shared_record": lineage_entry(shared.path, shared.path.parent.parent),
                   "shared_record_origin": shared.origin, "shared_schema_version": shared.record["schema_version"],
                   "shared_evidence_level": shared.record["evidence_level"], **recheck["inputs"]},
        "results": {group: dict(values) for group, values in recheck["groups"].items()},
        "consistent_with_shared_record": recheck["consistent"],
    }


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------

def _title(summary: Mapping[str, Any]) -> str:
    title = (f"{summary['run_label']}: evidence {summary['evidence_level']}, backend {summary['backend']}, "
             f"model {summary['model_id']}")
    return title + (" (cpu_smoke: not a GPU measurement)" if summary["evidence_level"] == "cpu_smoke" else "")


def draw_drift(summary: Mapping[str, Any]):
    """Each frozen rollout's behaviour drift after the update, per group, against the threshold."""
    threshold, groups = summary["behaviour_drift_threshold"], summary["groups"]
    fig, axes = plt.subplots(1, len(groups), figsize=(12, 4), sharey=True, squeeze=False)
    for ax, (group, entry) in zip(axes[0], groups.items()):
        decisions = sorted(entry["admission_decisions"], key=lambda d: d["behaviour_drift"])
        ax.bar(range(len(decisions)), [d["behaviour_drift"] for d in decisions],
               color=["tab:green" if d["state"] == "admitted" else "tab:red" for d in decisions])
        ax.axhline(threshold, color="black", linestyle="--", label=f"threshold = {threshold:g}")
        ax.set_title(f"{group}: {entry['admitted']} admitted (green), {entry['rejected']} rejected (red)")
        ax.set_xlabel("frozen rollouts, sorted by drift")
        ax.legend(loc="upper left")
    axes[0][0].set_ylabel("behaviour drift after the update\n(mean |delta log-prob| over action tokens)")
    fig.suptitle(_title(summary))
    fig.tight_layout()
    return fig


EVENT_STYLES = {"engine_release": ("v", "tab:red", 0.40), "engine_resume": ("^", "tab:green", 0.53),
                "weight_sync": ("D", "black", 0.66)}
"""marker, colour and height above the bar: a resume and the sync right after it stay distinguishable."""


def draw_timeline(summary: Mapping[str, Any]):
    """Stage events per group on one clock (blocks), engine state events (markers), memory samples below."""
    timeline, group_names = summary["timeline"], list(summary["groups"])
    phase_names = list(dict.fromkeys(event["phase"] for event in timeline["stage_events"]))
    palette = plt.get_cmap("tab20")
    colors = {phase: palette(index % 20) for index, phase in enumerate(phase_names)}
    fig, (ax_stage, ax_memory) = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True,
                                              gridspec_kw={"height_ratios": [1.1, 1]})
    for row, group in enumerate(group_names):
        span = [e for e in timeline["stage_events"] if e["group"] == group]
        for event in span:
            ax_stage.broken_barh([(event["start_s"], event["end_s"] - event["start_s"])], (row - 0.3, 0.6),
                                 facecolors=colors[event["phase"]], edgecolor="white", linewidth=0.5)
        for event in (e for e in summary["worker_events"] if e["group"] == group):
            marker, color, height = EVENT_STYLES.get(event["event"], ("o", "grey", 0.40))
            ax_stage.plot(event["start_s"], row + height, marker=marker, color=color, linestyle="none", markersize=6)
        ax_memory.axvspan(min(e["start_s"] for e in span), max(e["end_s"] for e in span), color=f"C{row}", alpha=0.08)
    ax_stage.set_yticks(range(len(group_names)),
                        [f"{g}\n(free_cache_engine={summary['groups'][g]['free_cache_engine']})" for g in group_names])
    ax_stage.set_ylim(-0.6, len(group_names) - 0.15)
    handles = [Patch(color=colors[p], label=p) for p in phase_names]
    handles += [Line2D([], [], marker=m, color=c, linestyle="none", label=e) for e, (m, c, _) in EVENT_STYLES.items()]
    ax_stage.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax_stage.set_title(_title(summary))
    for key, label in (("host_used_mb", "host memory used (whole machine)"),
                       ("gpu_used_mb", "GPU memory used (whole device)")):
        points = [(s["t_s"], s[key]) for s in timeline["samples"] if s[key] is not None]
        if points:
            ax_memory.plot(*zip(*points), marker=".", label=label)
        else:
            ax_memory.plot([], [], linestyle="none", label=label.split(" (")[0] + ": not sampled")
    ax_memory.set_xlabel("time since the experiment started (s)")
    ax_memory.set_ylabel("MiB")
    ax_memory.set_title("Resource samples on the same clock (shaded: each group's span)")
    ax_memory.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The learner's own run beside what the original course reported
# ---------------------------------------------------------------------------

def latest_shared_record(run_mode: str = "cpu_smoke", root: Path | None = None) -> Path | None:
    """The newest shared record of `run_mode` in that mode's default results folder, or None."""
    folder = default_results_dir(run_mode, root) / CLOSURE_FOLDER
    found = []
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # not a record this block can show
        if isinstance(record, dict) and record.get("schema_version") == SCHEMA and record.get("run_mode") == run_mode:
            found.append((str(record.get("created_utc", "")), path.name, path))
    return max(found)[2] if found else None


def own_run_lines(path: Path) -> list[str]:
    """The figures of one shared record that the original course also reported, in its terms."""
    system, lifecycle = read_summary(path, "system"), read_summary(path, "lifecycle")
    gpu = system["sampler"]["gpu_source"] is not None
    key, unit = ("gpu_peak_mb", "GPU") if gpu else ("host_peak_mb", "host (no GPU sampled)")
    groups = system["groups"]
    return [
        f"  update-phase sampled peak MiB ({unit}): " + ", ".join(
            f"{g} {_value(e['phases']['update'][key], 0)}" for g, e in groups.items()),
        "  update-phase seconds: " + ", ".join(f"{g} {e['phases']['update']['duration_s']:.3f}" for g, e in groups.items()),
        f"  whole-segment sampled peak MiB ({unit}): " + ", ".join(
            f"{g} {_value((system['sampled_gpu_peak_mb'] if gpu else system['sampled_host_peak_mb'])[g], 0)}"
            for g in groups),
        "  changed parameter tensors per group: " + ", ".join(
            f"{g} {e['changed_tensor_count']}" for g, e in lifecycle["groups"].items()),
        "  same-version |error| after the sync, mean / p99 / max: " + ", ".join(
            f"{g} {_agreement(e['same_version_after_sync'])}" for g, e in lifecycle["groups"].items()),
        "  admitted / rejected per group: " + ", ".join(
            f"{g} {e['admitted']} / {e['rejected']}" for g, e in lifecycle["groups"].items()),
    ]


def _shown(path: Path, root: Path) -> str:
    """`path` relative to the project root when it lies inside it (records name no machine paths)."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def evidence_beside_reported(chapter_id: str, shared: SharedRecord | None, *, root: Path | None = None) -> str:
    """The learner's own shared record (this run's, or in dry_run the newest cpu_smoke one) beside the
    figures the original course reported for it, each labelled with its evidence level."""
    root = root or resolve_project_root()
    path = shared.path if shared is not None else latest_shared_record("cpu_smoke", root)
    if path is None:
        lines = ["your run: no cpu_smoke record of the shared experiment yet under "
                 f"{_shown(default_results_dir('cpu_smoke', root) / CLOSURE_FOLDER, root)}"]
    else:
        record = load_record(path, schema_version=SCHEMA)
        level = record["evidence_level"]
        note = "code path on this machine, not a GPU measurement" if level == "cpu_smoke" else "measured here"
        lines = [f"your run ({level}: {note}): label {record['run_label']}, backend {record['backend']}, model "
                 f"{record['model'].get('model_id')} (weights {record['model'].get('weights')}), status "
                 f"{record['system_decision']['status']}", *own_run_lines(path)]
    lines.append('produce your own: set RUN_MODE = "cpu_smoke" and a new RUN_LABEL, or run '
                 "`python -m tools.course run --chapter PT-ROLLOUT-LIFECYCLE --run-mode cpu_smoke --label <label>`; "
                 "on a GPU, RUN_MODE = \"real_gpu\"")
    return "\n".join(lines + ["", reported_block(chapter_id, root)])
