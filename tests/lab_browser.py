"""Drive JupyterLab in headless Chromium: a throw-away Lab server, the browser, and page helpers.

Used by tests/repo/test_browser_lab.py. The browser is Debian's chromium at /usr/bin/chromium, driven
through Playwright's Python API; Playwright's own browser download is never used.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

CHROMIUM_PATH = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling out, and this machine's closed
# network refuses those connections; the user-data dir is given by launch_persistent_context.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
INSTALL_TARGET = "make browser-deps"
VIEWPORT = {"width": 1440, "height": 1000}

# Lab user settings for the test server: never write a document back, no news or update checks.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}

_PROMPT_COUNT = re.compile(r"^\[(\d+)\]:?$")


def missing_prerequisite() -> str | None:
    """Why the browser test cannot run here, or None when Chromium and Playwright are present."""
    if importlib.util.find_spec("playwright") is None:
        return (f"the Python package playwright is not installed; `{INSTALL_TARGET}` installs it "
                "(pinned in environment/browser-test.txt)")
    if not CHROMIUM_PATH.is_file():
        return f"{CHROMIUM_PATH} is missing; `{INSTALL_TARGET}` installs Debian's chromium"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_lab_settings(settings_dir: Path, settings: dict = LAB_SETTINGS) -> None:
    """Write `<plugin id>: {setting: value}` as JupyterLab user-settings files under settings_dir."""
    for plugin_id, values in settings.items():
        path = settings_dir / f"{plugin_id}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")


class LabServer:
    """A JupyterLab server on 127.0.0.1 with a random token, isolated in `work_dir`.

    Its root is `root`; nbgrader's formgrader treats `course_dir` as the course (the server runs
    there and CourseDirectory.root points there) with a gradebook and an exchange in `work_dir`,
    so nothing is written into the course folder.
    """

    def __init__(self, root: Path, course_dir: Path, work_dir: Path):
        self.root = Path(root).resolve()
        self.course_dir = Path(course_dir).resolve()
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.work_dir / "jupyter-lab.log"
        self.process: subprocess.Popen | None = None
        self._log_file = None

    def command(self) -> list[str]:
        """The `jupyter lab` command line of this server."""
        jupyter = Path(sys.executable).parent / "jupyter"
        return [
            str(jupyter), "lab", "--no-browser",
            "--ip=127.0.0.1", f"--port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--ServerApp.allow_root=True",
            f"--CourseDirectory.root={self.course_dir}",
            f"--CourseDirectory.db_url=sqlite:///{self.work_dir / 'gradebook.db'}",
            f"--Exchange.root={self.work_dir / 'exchange'}",
        ]

    def environment(self) -> dict[str, str]:
        """os.environ with private Jupyter folders and this interpreter's bin folder first on PATH."""
        env = dict(os.environ)
        # nbgrader creates a gradebook by running the `alembic` script, found on PATH only.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        for name, folder in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                             ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
                             ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"), ("IPYTHONDIR", "ipython")]:
            env[name] = str(self.work_dir / folder)
        env.pop("JUPYTER_TOKEN", None)
        return env

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server and return once its REST API answers."""
        (self.work_dir / "exchange").mkdir(parents=True, exist_ok=True)
        write_lab_settings(self.work_dir / "lab-settings")
        self._log_file = open(self.log_path, "w", encoding="utf-8")
        self.process = subprocess.Popen(
            self.command(), cwd=self.course_dir, env=self.environment(), stdin=subprocess.DEVNULL,
            stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with code {self.process.returncode}:\n{self.log_tail()}")
            if self._answers():
                return
            time.sleep(0.25)
        raise RuntimeError(f"jupyter lab did not answer within {timeout_s:.0f} s:\n{self.log_tail()}")

    def _answers(self) -> bool:
        request = urllib.request.Request(f"{self.base_url}/api/status",
                                         headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False  # not listening yet; the caller polls again

    def url(self, path: str) -> str:
        """Absolute URL of `path` on this server, carrying the token."""
        return f"{self.base_url}/{path.lstrip('/')}?token={self.token}"

    def log_tail(self, lines: int = 40) -> str:
        if self._log_file is not None:
            self._log_file.flush()
        if not self.log_path.is_file():
            return "(no log)"
        return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 20.0) -> list[str]:
        """Stop the server and every kernel it started; return what had to be forced (empty if clean)."""
        problems: list[str] = []
        if self.process is not None:
            try:
                children = psutil.Process(self.process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []  # the server has already exited, and its kernels with it
            if self.process.poll() is None:
                # SIGTERM makes jupyter_server shut its kernels down and exit.
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    problems.append(f"jupyter lab ignored SIGTERM for {timeout_s:.0f} s; killed")
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(10)
            _, alive = psutil.wait_procs(children, timeout=5)
            for proc in alive:
                problems.append(f"killed leftover child process {proc.pid}")
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    problems.append(f"process {proc.pid} exited while being killed")
        if self._log_file is not None:
            self._log_file.close()
        return problems


@contextmanager
def chromium_page(user_data_dir: Path, default_timeout_ms: int = 30_000):
    """A page of a fresh headless Chromium (/usr/bin/chromium); the browser is closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(user_data_dir), executable_path=str(CHROMIUM_PATH), headless=True,
            args=list(CHROMIUM_FLAGS), viewport=VIEWPORT)
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(default_timeout_ms)
            yield page
        finally:
            context.close()


# ---- the notebook file ------------------------------------------------------------------------

def cells_tagged(notebook: dict, tag: str) -> list[int]:
    """Indices of the cells that carry `tag`, in notebook order."""
    return [i for i, cell in enumerate(notebook["cells"]) if tag in cell.get("metadata", {}).get("tags", [])]


def code_cell_indices(notebook: dict) -> list[int]:
    return [i for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"]


def last_printed_literal(source: str) -> str:
    """The string literal of the last `print("...")` call in a cell's source."""
    printed = [node.args[0].value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
               and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
               and isinstance(node.args[0].value, str)]
    if not printed:
        raise ValueError("the cell prints no string literal")
    return printed[-1]


# ---- JupyterLab pages -------------------------------------------------------------------------

NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"

_EXECUTION_STATE_JS = """
(selector) => {
  const panel = document.querySelector(selector);
  if (!panel) return null;
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const prompts = {};
  for (const cell of panel.querySelectorAll('.jp-Cell.jp-CodeCell')) {
    const prompt = cell.querySelector('.jp-InputPrompt');
    prompts[cell.dataset.windowedListIndex] = prompt ? prompt.textContent.trim() : null;
  }
  return {status: indicator ? indicator.dataset.status : null, prompts: prompts};
}
"""


def execution_state(page) -> dict:
    """{"status": kernel status, "prompts": {cell index: prompt text}} of the open notebook."""
    state = page.evaluate(_EXECUTION_STATE_JS, NOTEBOOK)
    if state is None:
        raise AssertionError("no notebook panel is open")
    state["prompts"] = {int(index): text for index, text in state["prompts"].items()}
    return state


def execution_counts(prompts: dict[int, str]) -> dict[int, int | None]:
    """Cell index -> execution count shown in its prompt (None for `[ ]:` or `[*]:`)."""
    counts = {}
    for index, text in prompts.items():
        match = _PROMPT_COUNT.match(text or "")
        counts[index] = int(match.group(1)) if match else None
    return counts


def open_notebook(page, server: LabServer, rel_path: str, timeout_s: float = 60.0) -> None:
    """Open `rel_path` (relative to the server root) in JupyterLab and wait for an idle kernel."""
    page.goto(server.url(f"lab/tree/{urllib.parse.quote(rel_path)}"))
    page.locator(f'{NOTEBOOK} .jp-Notebook-ExecutionIndicator[data-status="idle"]').wait_for(
        timeout=timeout_s * 1000)


def cell(page, index: int):
    """Locator of the notebook cell at `index` (notebook order, as in the .ipynb file)."""
    return page.locator(f'{NOTEBOOK} .jp-Cell[data-windowed-list-index="{index}"]')


def click_menu(page, menu: str, command: str) -> None:
    """Open the main menu `menu` and click its item bound to `command`."""
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=re.compile(rf"^{re.escape(menu)}$")).click()
    page.locator(f'.lm-Menu .lm-Menu-item[data-command="{command}"]').click()


def run_all_cells(page, timeout_s: float = 60.0, poll_s: float = 0.3) -> dict:
    """Run > Run All Cells, then wait until no cell is queued or running and the kernel is idle.

    Returns the final execution state. A run stopped by an error also ends the wait; the caller
    checks which cells ran.
    """
    click_menu(page, "Run", "runmenu:run-all")
    deadline = time.monotonic() + timeout_s
    started, quiet_polls = False, 0
    while True:
        state = execution_state(page)
        busy = state["status"] != "idle" or any("*" in (text or "") for text in state["prompts"].values())
        all_counted = all(count is not None for count in execution_counts(state["prompts"]).values())
        if busy:
            started, quiet_polls = True, 0
        elif started or all_counted:
            quiet_polls += 1
            if quiet_polls >= 3:
                return state
        if time.monotonic() > deadline:
            raise AssertionError(f"Run All Cells did not finish within {timeout_s:.0f} s: {state}")
        time.sleep(poll_s)


def bring_into_view(locator, block: str = "center", attempts: int = 8) -> None:
    """Scroll `locator` into the notebook's view and wait until its position settles.

    With content-visibility windowing, cells take their real height only once shown, so a single
    scroll can land short; scrolling again until the element stops moving fixes that.
    """
    last_top = None
    for _ in range(attempts):
        top = locator.evaluate(f"el => {{ el.scrollIntoView({{block: '{block}'}}); "
                               "return el.getBoundingClientRect().top; }")
        locator.page.wait_for_timeout(150)
        if last_top is not None and abs(top - last_top) < 1:
            return
        last_top = top
    raise AssertionError(f"{locator} did not settle in view after {attempts} scrolls")


def output_area(page, index: int):
    """Locator of the output area of cell `index`."""
    return cell(page, index).locator(".jp-OutputArea")


def open_formgrader(page):
    """Nbgrader > Formgrader inside JupyterLab; returns a FrameLocator of the formgrader tab."""
    click_menu(page, "Nbgrader", "nbgrader:open-formgrader")
    return page.frame_locator("#formgrader iframe")
