"""`python -m tools.course`: parse arguments, call the library, print, exit.

Exit codes: 0 success, 1 a check/verification/chapter failed, 2 invalid input;
`preflight` exits 0 ready, 4 when only the model cache is missing, 3 blocked.
A run that seems stuck can be asked where it is: `kill -USR1 <pid>` writes every thread's stack to stderr.
"""

from __future__ import annotations

import argparse
import sys

from tools.core.paths import resolve_project_root
from tools.core.runs import RUN_MODES
from tools.errors import CourseError, GradingError


def cmd_check(args) -> int:
    from tools.course.authoring.check import check_course

    problems = check_course(args.root)
    for problem in problems:
        print(f"ERROR {problem}")
    if problems:
        print(f"{len(problems)} problem(s); see notebooks/AUTHORING.md")
        return 1
    print("course check: all chapter notebooks follow the template")
    return 0


def cmd_new_chapter(args) -> int:
    from tools.course.authoring.scaffold import new_chapter

    made = new_chapter(args.root, args.chapter_id)
    for path in (made.notebook, made.hidden_tests, made.mutants):
        print(f"wrote {path.relative_to(args.root)}")
    print(f"catalog: {args.chapter_id} is now implemented. Replace every TEMPLATE: placeholder (`check` lists them), "
          "then run `grading build`, `run --chapter ...`, `grading verify --chapter ...` and `registry`.")
    return 0


def cmd_grading_build(args) -> int:
    from tools.core.catalog import select_chapters
    from tools.course.grader.build import build_sources

    chapters = select_chapters(args.chapter, args.root)
    touched = build_sources(args.root, chapters, check=args.check)
    if args.check:
        for path in touched:
            print(f"STALE {path}: run `python -m tools.course grading build`")
        if touched:
            return 1
        print(f"grading sources up to date ({len(chapters)} chapter(s))")
        return 0
    for path in touched:
        print(f"wrote {path}")
    print(f"grading sources built ({len(chapters)} chapter(s), {len(touched)} changed)")
    return report_clause_coverage(args.root, chapters)


def report_clause_coverage(root, chapters) -> int:
    """Print, per chapter, how many seeded cases of each differential test reach each named clause, and
    which hard-value classes those cases contain."""
    from tools.course.grader.build import (
        clause_coverage,
        coverage_problems,
        coverage_rows,
        format_coverage,
        hard_class_rows,
    )

    problems = []
    for chapter in chapters:
        calls = clause_coverage(root, chapter)
        if calls:
            print(f"\nclause coverage of {chapter.id} (seeded cases of each differential test, reference alone)")
            print(format_coverage(coverage_rows(chapter.id, calls)))
            print(f"\nhard-value classes of {chapter.id} (what the cases reaching each clause contain)")
            print(format_coverage(hard_class_rows(chapter.id, calls), last="hard-value classes"))
        problems += coverage_problems(chapter.id, calls)
    for problem in problems:
        print(f"ERROR {problem}")
    if problems:
        print(f"grading build FAILED: {len(problems)} clause-coverage problem(s); see notebooks/AUTHORING.md")
        return 1
    return 0


def cmd_grading_verify(args) -> int:
    from tools.core.catalog import select_chapters
    from tools.course.grader.verify import format_matrix, verify_chapter

    failed = []
    for chapter in select_chapters(args.chapter, args.root):
        report = verify_chapter(args.root, chapter, full=args.full, progress=lambda message: print(message, flush=True))
        print(format_matrix(report), flush=True)
        if not report.passed:
            failed.append(chapter.id)
    if not args.full:
        print("endless-loop probe: run with --full (the test suite probes it once, on its toy chapter)")
    if failed:
        print(f"grading verify FAILED for {', '.join(failed)}")
        return 1
    return 0


def _course_dir(args):
    """The nbgrader course folder: `--course-dir`, or the course's own `grading/`."""
    from pathlib import Path

    from tools.course.layout import CourseLayout

    return Path(args.course_dir).resolve() if args.course_dir else CourseLayout(args.root).grading


def cmd_grading_release(args) -> int:
    from tools.core.catalog import select_chapters
    from tools.course.classroom.instructor import release_assignment
    from tools.course.layout import CourseLayout

    for chapter in select_chapters(args.chapter, args.root):
        release = release_assignment(args.root, chapter, _course_dir(args), CourseLayout(args.root).grading_logs)
        print(f"released {chapter.id}: {release}")
    return 0


def cmd_grading_feedback(args) -> int:
    from tools.core.catalog import select_chapters
    from tools.course.classroom.instructor import regenerate_feedback

    chapter = select_chapters([args.chapter], args.root)[0]
    run = regenerate_feedback(args.root, chapter, _course_dir(args))
    for path in run.written:
        print(f"wrote {path}")
    for student, error in run.failed.items():
        print(f"FAILED {student}: {error}")
    print(f"feedback for {chapter.id}: {len(run.written)} written, {len(run.failed)} failed")
    return 1 if run.failed else 0


def cmd_grading_autograde(args) -> int:
    from pathlib import Path

    from tools.core.catalog import select_chapters
    from tools.course.classroom.batch import autograde_chapter, format_summary
    from tools.course.classroom.ray_grading import ray_executor
    from tools.course.classroom.sandbox import Limits
    from tools.course.nbgrader_cli import course_cell_timeout

    chapter = select_chapters([args.chapter], args.root)[0]
    course = _course_dir(args)
    cell_timeout = args.cell_timeout if args.cell_timeout is not None else course_cell_timeout(course)
    limits = Limits(cell_timeout_s=cell_timeout, notebook_timeout_s=args.notebook_timeout,
                    memory_mb=args.memory_mb or None, cpu_seconds=args.cpu_seconds or None,
                    max_processes=args.max_processes or None, file_size_mb=args.file_size_mb or None,
                    cpus=args.cpus or None, output_mb=args.output_mb)
    report = autograde_chapter(args.root, chapter, course=course,
                               jobs=args.jobs, limits=limits,
                               output_dir=Path(args.output_dir) if args.output_dir else None,
                               show_progress=not args.no_progress, require_isolation=args.require_isolation,
                               remote=ray_executor(args.executor, args.address, args.ray_cpus))
    print(format_summary(report), flush=True)
    if not report.passed:
        print(f"grading autograde: {len(report.failures)} submission(s) not graded or without feedback")
        return 1
    return 0


def cmd_run(args) -> int:
    from tools.core.catalog import project_chain, select_chapters
    from tools.course.runs.runner import format_summary, parse_parameters, run_chapters

    extra = parse_parameters(args.param)
    chapters = project_chain(args.chain, args.root) if args.chain else select_chapters(args.chapter, args.root)
    try:
        label, outcomes = run_chapters(args.root, chapters, run_mode=args.run_mode, label=args.label,
                                       results_dir=args.results_dir, show_progress=not args.no_progress,
                                       extra_parameters=extra, executor=args.executor, address=args.address,
                                       ray_cpus=args.ray_cpus)
    except KeyboardInterrupt as interrupted:
        outcomes = getattr(interrupted, "outcomes", None)
        if outcomes is not None:
            print(format_summary(outcomes), flush=True)
        print("interrupted: every finished record is kept; rerun under a new --label", flush=True)
        return 130
    print(f"run label: {label}")
    print(format_summary(outcomes))
    failed = [outcome.chapter for outcome in outcomes if outcome.status != "passed"]
    if failed:
        print(f"{len(failed)} chapter(s) failed: {', '.join(failed)}")
        return 1
    return 0


def cmd_bench(args) -> int:
    import json
    import time

    from tools.core.catalog import select_chapters
    from tools.course.layout import CourseLayout
    from tools.course.runs.bench import BENCH_SCHEMA, bench_chapter, bench_suite, format_bench

    chapters = [bench_chapter(args.root, chapter, copies=args.copies, grading=not args.no_grading,
                              grading_only=args.grading_only, hostile=args.hostile, attacks=args.attack,
                              ray=args.ray)
                for chapter in select_chapters(args.chapter, args.root)]
    suite = bench_suite(args.root, args.workers) if args.suite else None
    record = {"schema_version": BENCH_SCHEMA, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "chapters": chapters, "suite": suite}
    folder = CourseLayout(args.root).bench_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bench_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(format_bench(chapters, suite))
    print(f"bench record: {path}")
    return 0


def cmd_preflight(args) -> int:
    from tools.core.preflight import format_preflight, preflight_exit_code
    from tools.course.runs.profiles import find_profile, profile_preflight

    profile = find_profile(args.profile, args.root)
    report = profile_preflight(profile, args.root, cache_dir=args.cache_dir)
    print(format_preflight(report, title=f"preflight {profile.name} ({profile.title})"))
    return preflight_exit_code(report)


def cmd_registry(args) -> int:
    from tools.course.runs.readme import README_PATH, write_chapter_table
    from tools.course.runs.registry import REGISTRY_PATH, write_registry

    stale = {REGISTRY_PATH: write_registry(args.root, check=args.check),
             README_PATH: write_chapter_table(args.root, check=args.check)}
    if args.check:
        for path in (path for path, is_stale in stale.items() if is_stale):
            print(f"STALE {path}: run `python -m tools.course registry` and commit it")
        if any(stale.values()):
            return 1
        print(f"{REGISTRY_PATH} and the chapter table of {README_PATH} are up to date")
        return 0
    for path, is_stale in stale.items():
        print(f"{'wrote' if is_stale else 'unchanged'} {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.course", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="validate every chapter notebook against the template")
    check.set_defaults(handler=cmd_check)

    scaffold = commands.add_parser("new-chapter", help="write a planned catalog chapter from the template "
                                                        "(notebook, hidden tests, mutants) and mark it implemented")
    scaffold.add_argument("chapter_id", help="a planned chapter id of notebooks/catalog.toml")
    scaffold.set_defaults(handler=cmd_new_chapter)

    grading = commands.add_parser("grading", help="nbgrader source build and grader verification")
    grading_commands = grading.add_subparsers(dest="grading_command", required=True)
    build = grading_commands.add_parser("build", help="build grading/source from the chapters and hidden tests")
    build.add_argument("--check", action="store_true", help="fail if grading/source is stale instead of writing")
    build.add_argument("--chapter", action="append", help="chapter id or slug (repeatable; default: all)")
    build.set_defaults(handler=cmd_grading_build)
    verify = grading_commands.add_parser("verify", help="autograde planted submissions and check their scores")
    verify.add_argument("--chapter", action="append", help="chapter id or slug (repeatable; default: all)")
    verify.add_argument("--full", action="store_true",
                        help="grade every planted submission through nbgrader too (and an endless loop), and require "
                             "the oracle to agree with nbgrader test for test; run before a release")
    verify.set_defaults(handler=cmd_grading_verify)
    release = grading_commands.add_parser("release", help="nbgrader generate_assignment: the learners' release")
    release.add_argument("--chapter", action="append", help="chapter id or slug (repeatable; default: all)")
    release.add_argument("--course-dir", help="nbgrader course folder (default: grading/)")
    release.set_defaults(handler=cmd_grading_release)
    feedback = grading_commands.add_parser(
        "feedback", help="rewrite every autograded student's leak-free feedback from the gradebook "
                         "(e.g. after manual grading) into <course>/feedback/<student>/<slug>/")
    feedback.add_argument("--chapter", required=True, help="chapter id or slug")
    feedback.add_argument("--course-dir", help="nbgrader course folder (default: grading/)")
    feedback.set_defaults(handler=cmd_grading_feedback)
    autograde = grading_commands.add_parser(
        "autograde", help="grade every submission of a chapter in parallel sandboxed nbgrader workers, "
                          "then merge, write feedback and a class report (exit 1 if any submission fails)")
    autograde.add_argument("--chapter", required=True, help="chapter id or slug")
    autograde.add_argument("--jobs", type=int, default=1, help="parallel workers (default 1)")
    autograde.add_argument("--course-dir", help="nbgrader course folder (default: grading/); submissions in "
                                                "<course>/submitted/<student>/<slug>/<slug>.ipynb")
    autograde.add_argument("--cell-timeout", type=int, default=None,
                           help="per-cell wall-clock limit in s (default: Execute.timeout of the course config)")
    autograde.add_argument("--notebook-timeout", type=float, default=600.0,
                           help="per-notebook wall-clock limit in s; the worker is killed after it (default 600)")
    autograde.add_argument("--memory-mb", type=int, default=4096,
                           help="memory of one submission (all its processes: its control group; each process's "
                                "address space as well), 0 = none")
    autograde.add_argument("--cpu-seconds", type=int, default=600, help="kernel CPU-time limit, 0 = none")
    autograde.add_argument("--max-processes", type=int, default=64,
                           help="processes and threads of one submission (its control group, and the kernel's "
                                "uid), 0 = none")
    autograde.add_argument("--file-size-mb", type=int, default=256, help="largest file the kernel may write, 0 = none")
    autograde.add_argument("--cpus", type=float, default=1.0,
                           help="CPUs one submission may use at most (its control group's quota), 0 = no quota")
    autograde.add_argument("--output-mb", type=int, default=8,
                           help="output a submission's notebook may produce; past it the kernel is stopped (default 8)")
    autograde.add_argument("--output-dir", help="record, logs and class report (default: build/grading/autograde/...)")
    autograde.add_argument("--require-isolation", action="store_true",
                           help="refuse to run unless network/PID namespaces and a separate uid are available")
    autograde.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    autograde.add_argument("--executor", choices=("local", "ray"), default="local",
                           help="local: --jobs sandboxed workers here; ray: --jobs Ray actors, each grading in its "
                                "node's sandbox, the gradebook merged here")
    autograde.add_argument("--address", help="the Ray cluster's head, HOST:PORT or 'auto' (default: a local cluster)")
    autograde.add_argument("--ray-cpus", type=int,
                           help="CPUs of the local Ray cluster started when --address is not given")
    autograde.set_defaults(handler=cmd_grading_autograde)

    run = commands.add_parser("run", help="execute chapters headless with papermill")
    selection = run.add_mutually_exclusive_group()
    selection.add_argument("--chapter", action="append", help="chapter id or slug (repeatable; default: all)")
    selection.add_argument("--chain", metavar="PROJECT",
                           help="a project and every project it needs, in order, each reading the manifest the "
                                "one before it wrote (e.g. --chain 62 runs 64, 63, 65, 62)")
    run.add_argument("--run-mode", default="cpu_smoke", choices=RUN_MODES)
    run.add_argument("--label", help="run label naming the records (default for dry_run/cpu_smoke: a timestamp)")
    run.add_argument("--results-dir", help="where records go (default: build/results or benchmarks/results)")
    run.add_argument("--param", action="append", metavar="NAME=VALUE",
                     help="extra notebook parameter, e.g. MODEL_SOURCE=random_init (repeatable)")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="local: one chapter after another here; ray: each chapter a Ray task (real_gpu: one GPU "
                          "each), in prerequisite order")
    run.add_argument("--address", help="the Ray cluster's head, HOST:PORT or 'auto' (default: a local cluster)")
    run.add_argument("--ray-cpus", type=int, help="CPUs of the local Ray cluster started when --address is not given")
    run.set_defaults(handler=cmd_run)
    registry = commands.add_parser("registry", help="generate benchmarks/results/REGISTRY.md (catalog, records, reported "
                                                    "figures) and the README chapter table")
    registry.add_argument("--check", action="store_true", help="fail if the registry is stale instead of writing")
    registry.set_defaults(handler=cmd_registry)

    bench = commands.add_parser("bench", help="time running, verifying and class-grading each chapter "
                                              "(and optionally the test suite); JSON in build/bench/")
    bench.add_argument("--chapter", action="append", help="chapter id or slug (repeatable; default: all)")
    bench.add_argument("--copies", type=int, default=6, help="submissions graded per chapter and grader (default 6)")
    bench.add_argument("--no-grading", action="store_true", help="skip the plain-nbgrader vs class-grader comparison")
    bench.add_argument("--grading-only", action="store_true",
                       help="only the class-grading comparison (plain nbgrader vs --jobs 1/2, the boundary's cost, "
                            "a correct submission beside a CPU hog)")
    bench.add_argument("--hostile", action="store_true",
                       help="with --grading-only: instead, an honest class and the same class beside each attack of "
                            "issue 33 (wall and CPU seconds, what each attacker spent, honest marks kept)")
    bench.add_argument("--attack", action="append", help="with --hostile: only these attacks (repeatable)")
    bench.add_argument("--ray", action="store_true",
                       help="with --grading-only: the class graded by the local executor (--jobs 2) and by 2 Ray actors "
                            "on a local cluster; Ray's overhead and the projected time of 1,000 submissions")
    bench.add_argument("--suite", action="store_true", help="also run the test suite with --durations=0")
    bench.add_argument("--workers", type=int, default=2, help="pytest-xdist workers for --suite (default 2)")
    bench.set_defaults(handler=cmd_bench)

    preflight = commands.add_parser("preflight", help="check an environment profile (exit 0 ready, 4 model cache only, 3 blocked)")
    preflight.add_argument("--profile", required=True, help="profile name or alias (see environment/profiles.toml)")
    preflight.add_argument("--cache-dir", help="model cache folder (default: $COURSE_MODEL_CACHE or model_cache/)")
    preflight.set_defaults(handler=cmd_preflight)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.root = resolve_project_root()
        return args.handler(args)
    except GradingError as error:  # nbgrader or the oracle failed: the work did not complete
        report_error(error)
        return 1
    except CourseError as error:
        report_error(error)
        return 2


def report_error(error: CourseError) -> None:
    """One ERROR line (with the notebook, cell, exercise or stage when known) and the fix."""
    where = ", ".join(f"{name} {value}" for name, value in error.fields().items() if name not in ("cause", "fix"))
    print(f"ERROR {error}" + (f" [{where}]" if where else ""), file=sys.stderr)
    if error.fix:
        print(f"fix: {error.fix}", file=sys.stderr)


if __name__ == "__main__":
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    sys.exit(main())
