"""Grading a class on a Ray cluster: `grading autograde --executor ray`.

Each of the batch's `jobs` slots is a Ray actor (`NodeSlot`, one CPU) that sets up, on its own node, what
a local slot has: the node's sandbox (namespaces, control groups, a uid of its own where the node allows),
a grading worker, and a node-local copy of the assignment (the config, the source folder and the
gradebook template; never the course gradebook or another student's work). The driver sends each
submission's files to a free actor; the actor grades them with `batch.grade_in_worker`, exactly as a local
slot does, and returns the submission's private nbgrader course (its gradebook and autograded notebook) as
bytes. The driver unpacks it into its own batch folder and merges it with the local executor's code
(`batch._finish`): the course gradebook keeps one writer, the driver.

A node or actor that dies mid-submission loses no grade: nothing of that submission was merged; it is
graded once more on a fresh actor, and reported as not graded if that one dies too.
"""

from __future__ import annotations

import io
import queue
import shutil
import tarfile
import tempfile
from pathlib import Path

from tools.course.layout import NbgraderCourse

RESULT_FIELDS = ("student", "status", "reason", "enforced", "seconds", "worker", "timings", "boundary",
                 "hidden_inputs", "collected_utc")
"""The fields of `batch.WorkerResult` an actor sends back (its paths are node-local and are rebuilt)."""


def pack(folder: Path) -> bytes:
    """`folder`'s regular files and folders as a gzipped tar (links and other special files are left out)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def unpack(data: bytes, target: Path) -> None:
    """Extract a `pack` archive into `target` (tar's `data` filter: no links out, no absolute paths)."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(target, filter="data")


def assignment_bundle(course: Path, slug: str) -> bytes:
    """What a node needs of the course to grade `slug`: the nbgrader config and the assignment's source folder."""
    folders = NbgraderCourse(course)
    with tempfile.TemporaryDirectory(prefix="course-bundle-") as scratch:
        bundle = NbgraderCourse(Path(scratch))
        shutil.copy(folders.config, bundle.config)
        shutil.copytree(folders.source_dir(slug), bundle.source_dir(slug))
        return pack(Path(scratch))


class NodeSlot:
    """One grading slot on a Ray node (run as a Ray actor); see the module docstring."""

    def __init__(self, root: str, slug: str, bundle: bytes, template: bytes, limits, extensions: dict,
                 source, kernel_name: str):
        from tools.course.classroom.batch import WorkerContext, _batch_root
        from tools.course.classroom.cgroups import BatchCgroups, probe_cgroups
        from tools.course.classroom.sandbox import UidPool, plan_masks, probe_host
        from tools.course.classroom.slot import GradingSlot
        from tools.course.scratch import owned_folder

        self.slug = slug
        self.work = owned_folder("course-ray-slot-")  # a slot whose process died is removed by the next
        course = self.work / "course"
        unpack(bundle, course)
        host = probe_host()
        masks = plan_masks(Path(root), course)
        self.batch_dir = _batch_root(masks, host)
        template_course = NbgraderCourse(self.batch_dir / "template")
        template_course.folder.mkdir(mode=0o700)
        template_path = template_course.gradebook
        template_path.write_bytes(template)
        cgroup_host = probe_cgroups()
        self.cgroups = BatchCgroups(cgroup_host, 1) if cgroup_host.version else None
        self.uid_pool = UidPool(1) if host.separate_uid else None
        uid = self.uid_pool.uids[0] if self.uid_pool else None
        self.slot = GradingSlot(self.batch_dir / "slot-0", uid, limits, host, masks, kernel_name, Path(root),
                                self.cgroups)
        self.slot.start(fork=False)  # a Ray worker runs threads of its own: a new interpreter, not a fork
        self.logs = self.work / "logs"
        self.logs.mkdir()
        self.context = WorkerContext(course, slug, template_path, limits, self.logs, extensions, source)

    def grade(self, index: int, student: str, files: bytes, collected: str) -> dict:
        """Grade one submission (its folder's files as a `pack` archive); the reply holds the result's fields,
        its private course as a `pack` archive (when it has one) and the tail of its log."""
        from tools.course.classroom.batch import Submission, grade_in_worker
        from tools.course.scratch import remove_tree

        folder = NbgraderCourse(self.work / "received").submission_dir(student, self.slug)
        unpack(files, folder)
        submission = Submission(student, folder, folder / f"{self.slug}.ipynb", collected=collected)
        try:
            result = grade_in_worker(submission, index, self.slot, self.context)
            try:
                reply = {name: getattr(result, name) for name in RESULT_FIELDS}
                reply["course"] = pack(result.course_dir) if result.course_dir.is_dir() else None
                log = self.logs / f"autograde_{index:04d}.log"
                reply["log"] = log.read_bytes() if log.is_file() else None
                return reply
            finally:
                remove_tree(result.worker_dir)
        finally:
            remove_tree(folder)

    def host(self) -> str:
        import socket

        return socket.gethostname()

    def close(self) -> None:
        from tools.course.scratch import remove_tree

        self.slot.close()
        if self.uid_pool:
            self.uid_pool.release()
        if self.cgroups is not None:
            self.cgroups.close()
        remove_tree(self.batch_dir)
        shutil.rmtree(self.work, ignore_errors=True)


class RayGraders:
    """The driver's side: `jobs` NodeSlot actors, handed out one submission at a time (thread-safe)."""

    def __init__(self, ray, root: Path, slug: str, course: Path, template: Path, context, kernel_name: str,
                 jobs: int, unpack_dir: Path):
        self.ray = ray
        self.unpack_dir = unpack_dir
        self.arguments = (str(root), slug, assignment_bundle(course, slug), template.read_bytes(), context.limits,
                          context.extensions, context.source, kernel_name)
        self.actor_class = ray.remote(num_cpus=1, max_restarts=0)(NodeSlot)
        self.log_dir = context.log_dir
        self.free: queue.Queue = queue.Queue()
        for _ in range(jobs):
            self.free.put(self._new_actor())
        self.hosts = sorted(set(ray.get([actor.host.remote() for actor in list(self.free.queue)])))

    def _new_actor(self):
        return self.actor_class.remote(*self.arguments)

    def grade(self, index: int, submission) -> object:
        """`submission` graded on a free actor, as a `batch.WorkerResult` whose folders lie under `unpack_dir`.
        An actor that dies is replaced and the submission graded once more; a second death raises."""
        from ray.exceptions import RayActorError

        from tools.course.classroom.batch import collected_utc

        files = pack(submission.folder)
        collected = collected_utc(submission)
        actor = self.free.get()
        try:
            for attempt in (1, 2):
                try:
                    reply = self.ray.get(actor.grade.remote(index, submission.student, files, collected))
                    return self._result(index, reply)
                except RayActorError as error:
                    actor = self._new_actor()
                    if attempt == 2:
                        raise RuntimeError(f"grading worker exited: the Ray actor grading it died twice ({error})"
                                           ) from None
        finally:
            self.free.put(actor)

    def _result(self, index: int, reply: dict):
        from tools.course.classroom.batch import WorkerResult

        folder = self.unpack_dir / f"submission-{index:04d}"
        course = folder / "course"
        archive = reply.pop("course")
        if archive is not None:
            unpack(archive, course)
        log = reply.pop("log")
        if log is not None:
            (self.log_dir / f"autograde_{index:04d}.log").write_bytes(log)
        return WorkerResult(worker_dir=folder, course_dir=course, **reply)

    def describe(self) -> dict:
        """The cluster the class was graded on (for the class record)."""
        resources = self.ray.cluster_resources()
        return {"executor": "ray", "hosts": self.hosts, "cpus": resources.get("CPU", 0.0),
                "actors": self.free.qsize()}

    def close(self) -> None:
        for actor in list(self.free.queue):
            try:
                self.ray.get(actor.close.remote())
            except Exception:  # an actor that died has nothing left to close
                pass
            self.ray.kill(actor)


def ray_executor(executor: str = "ray", address: str | None = None, num_cpus: int | None = None):
    """`autograde_chapter`'s `remote` for `--executor ray`: connects now (an unreachable address fails here,
    before any work, naming it), then starts the batch's NodeSlot actors when the batch asks. None for
    `--executor local`; an unknown executor, or an address without the Ray executor, is refused."""
    from tools.course.ray_cluster import check_executor, connect

    check_executor(executor, address)
    if executor == "local":
        return None

    ray = connect(address, num_cpus=num_cpus)

    def start(root, slug, course, template, context, kernel_name, jobs, unpack_dir) -> RayGraders:
        return RayGraders(ray, root, slug, course, template, context, kernel_name, jobs, unpack_dir)

    return start
