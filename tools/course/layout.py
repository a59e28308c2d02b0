"""Where the course keeps its grading files and build outputs: the one owner of those paths.

`CourseLayout(root)` names, for one checkout of the course:

* the grading inputs in `grading/`: the nbgrader config, each chapter's hidden tests
  (`hidden_tests/<slug>.py`) and planted wrong solutions (`mutants/<slug>/`);
* the course's own nbgrader course folder, `grading/` itself (`.nbgrader`);
* the outputs under `build/`: papermill runs, run locks, grading logs, class-grading records, benchmarks.

`NbgraderCourse(folder)` names nbgrader's folders inside one nbgrader course folder (the repository's
`grading/`, the folder of `--course-dir`, or a throw-away course that `grading verify`, `bench` or a
grading worker makes) as nbgrader's `CourseDirectory` does, `<step>/[<student>/]<assignment>/<notebook>`,
where a chapter's assignment id and notebook name are both its slug; and its gradebook.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.core.catalog import Chapter

GRADING_DIR = Path("grading")
BUILD_DIR = Path("build")
CONFIG_FILE = "nbgrader_config.py"
GRADEBOOK_FILE = "gradebook.db"


@dataclass(frozen=True)
class NbgraderCourse:
    """nbgrader's folders and gradebook in the course folder `folder`."""

    folder: Path

    def __post_init__(self):
        object.__setattr__(self, "folder", Path(self.folder))

    @property
    def config(self) -> Path:
        """`nbgrader_config.py`: the course's nbgrader settings."""
        return self.folder / CONFIG_FILE

    @property
    def gradebook(self) -> Path:
        return self.folder / GRADEBOOK_FILE

    @property
    def gradebook_url(self) -> str:
        """The gradebook as nbgrader's `Gradebook(...)` opens it."""
        return f"sqlite:///{self.gradebook}"

    def source_dir(self, slug: str) -> Path:
        return self.folder / "source" / slug

    def source(self, slug: str) -> Path:
        """`source/<slug>/<slug>.ipynb`: the source notebook that `grading build` writes."""
        return self.source_dir(slug) / f"{slug}.ipynb"

    def release(self, slug: str) -> Path:
        """`release/<slug>/<slug>.ipynb`: what learners receive (`nbgrader generate_assignment`)."""
        return self.folder / "release" / slug / f"{slug}.ipynb"

    @property
    def submitted_root(self) -> Path:
        """`submitted/`: one folder per student."""
        return self.folder / "submitted"

    def submission_dir(self, student: str, slug: str) -> Path:
        return self.submitted_root / student / slug

    def submission(self, student: str, slug: str) -> Path:
        """`submitted/<student>/<slug>/<slug>.ipynb`."""
        return self.submission_dir(student, slug) / f"{slug}.ipynb"

    @property
    def autograded_root(self) -> Path:
        return self.folder / "autograded"

    def autograded_dir(self, student: str, slug: str) -> Path:
        return self.autograded_root / student / slug

    def autograded(self, student: str, slug: str) -> Path:
        """`autograded/<student>/<slug>/<slug>.ipynb`: the notebook as nbgrader graded it."""
        return self.autograded_dir(student, slug) / f"{slug}.ipynb"

    def autograded_students(self, slug: str) -> list[str]:
        """Every student with an autograded notebook of `slug`, sorted."""
        return sorted(path.parent.parent.name for path in self.autograded_root.glob(f"*/{slug}/{slug}.ipynb"))

    def feedback_dir(self, student: str, slug: str) -> Path:
        """`feedback/<student>/<slug>/`: the student's feedback (HTML and JSON)."""
        return self.folder / "feedback" / student / slug


@dataclass(frozen=True)
class CourseLayout:
    """The grading inputs, the nbgrader course folder and the build outputs of the checkout at `root`.

    `grading` is the course's own nbgrader course folder, `<root>/grading` unless given.
    """

    root: Path
    grading: Path | None = None

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))
        object.__setattr__(self, "grading", Path(self.grading) if self.grading is not None
                           else self.root / GRADING_DIR)

    # -- the grading inputs, always in <root>/grading --------------------------------------------

    @property
    def config_template(self) -> Path:
        """`grading/nbgrader_config.py`: the settings every course folder of this checkout starts from."""
        return self.root / GRADING_DIR / CONFIG_FILE

    def hidden_tests(self, slug: str) -> Path:
        """`grading/hidden_tests/<slug>.py`: the chapter's hidden tests."""
        return self.root / GRADING_DIR / "hidden_tests" / f"{slug}.py"

    def mutants(self, slug: str) -> Path:
        """`grading/mutants/<slug>/`: the chapter's planted wrong solutions."""
        return self.root / GRADING_DIR / "mutants" / slug

    # -- the course's nbgrader course folder -----------------------------------------------------

    @property
    def nbgrader(self) -> NbgraderCourse:
        """nbgrader's folders in `grading` (`grading build` writes its `source/`)."""
        return NbgraderCourse(self.grading)

    # -- the build outputs -----------------------------------------------------------------------

    @property
    def build(self) -> Path:
        return self.root / BUILD_DIR

    def run_dir(self, label: str) -> Path:
        """`build/runs/<label>/`: the executed notebooks of one papermill batch run."""
        return self.build / "runs" / label

    def run_lock(self, label: str) -> Path:
        """`build/locks/<label>.lock`: held while a batch run of `label` is in progress."""
        return self.build / "locks" / f"{label}.lock"

    @property
    def grading_logs(self) -> Path:
        """`build/grading/`: logs and reports of `grading release` and `grading verify`."""
        return self.build / "grading"

    def autograde_output(self, slug: str, label: str) -> Path:
        """`build/grading/autograde/<slug>/<label>/`: a class-grading record, its logs and class report."""
        return self.grading_logs / "autograde" / slug / label

    @property
    def bench_dir(self) -> Path:
        """`build/bench/`: benchmark records."""
        return self.build / "bench"


# Shortcuts for callers that hold the repository root and a chapter.

def hidden_tests_path(root: Path, chapter: Chapter) -> Path:
    """`grading/hidden_tests/<slug>.py`: the chapter's hidden tests."""
    return CourseLayout(root).hidden_tests(chapter.slug)


def mutants_dir(root: Path, chapter: Chapter) -> Path:
    """`grading/mutants/<slug>/`: the chapter's planted wrong solutions."""
    return CourseLayout(root).mutants(chapter.slug)


def source_notebook_path(root: Path, chapter: Chapter) -> Path:
    """`grading/source/<slug>/<slug>.ipynb`: the generated nbgrader source notebook."""
    return CourseLayout(root).nbgrader.source(chapter.slug)
