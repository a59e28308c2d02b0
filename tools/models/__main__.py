"""`python -m tools.models lab-build`: build (once) the lab models and say what they are.

`make run` calls it before the chapters, so no chapter's run pays for a build.
"""

from __future__ import annotations

import argparse
import sys

from tools.errors import CourseError, exit_code_for


def main(argv: list[str] | None = None) -> int:
    from tools.models.lab import LAB_RECIPES, build_lab_model, lab_identity

    parser = argparse.ArgumentParser(prog="python -m tools.models", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("lab-build", help="build the lab models (cached under build/lab_models)")
    build.add_argument("--name", choices=[*LAB_RECIPES, "all"], default="all")
    args = parser.parse_args(argv)
    names = list(LAB_RECIPES) if args.name == "all" else [args.name]
    try:
        for name in names:
            folder = build_lab_model(name)
            info = lab_identity(folder)
            print(f"{name}: {folder}  parameters={info['parameters']}  steps={info['pretraining']['steps']}  "
                  f"heldout_exact_match={info['heldout_exact_match']['accuracy']:.3f}  "
                  f"build_cpu_s={info['build_seconds']['cpu']}  weights_sha256={info['weights_sha256'][:12]}")
    except CourseError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return exit_code_for(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
