"""`python -m tools.models lab-build | lab-commit`: the lab models, checked or built, and what they are.

`lab-build` checks the committed lab weights (or, with COURSE_LAB_MODELS=build, builds the models once
under the numerics in force); `make run` calls it before the chapters, so no chapter's run pays for a
build. `lab-commit` pretrains them under the pinned numerics profile and writes them into
tools/models/lab_weights/ (commit the result).
"""

from __future__ import annotations

import argparse
import sys

from tools.errors import CourseError, exit_code_for


def main(argv: list[str] | None = None) -> int:
    from tools.models.lab import LAB_RECIPES, build_lab_model, commit_lab_models, lab_identity, lab_source

    parser = argparse.ArgumentParser(prog="python -m tools.models", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("lab-build", help="check the committed lab models (COURSE_LAB_MODELS=build: build "
                                                  "them under build/lab_models)")
    build.add_argument("--name", choices=[*LAB_RECIPES, "all"], default="all")
    commands.add_parser("lab-commit", help="pretrain the lab models under the pinned numerics and write them into "
                                           "tools/models/lab_weights/")
    args = parser.parse_args(argv)
    name = getattr(args, "name", "all")
    names = list(LAB_RECIPES) if name == "all" else [name]
    try:
        folders = commit_lab_models() if args.command == "lab-commit" else {name: build_lab_model(name) for name in names}
        for name, folder in folders.items():
            info = lab_identity(folder)
            print(f"{name} ({lab_source() if args.command == 'lab-build' else 'committed'}): {folder}  "
                  f"parameters={info['parameters']}  steps={info['pretraining']['steps']}  "
                  f"heldout_exact_match={info['heldout_exact_match']['accuracy']:.3f}  "
                  f"build_cpu_s={info['build_seconds']['cpu']}  weights_sha256={info['weights_sha256'][:12]}")
    except CourseError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return exit_code_for(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
