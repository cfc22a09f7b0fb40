"""Start a real JupyterLab server and drive headless Chromium against it (test helper).

What it does: `find_chromium()` locates Debian's Chromium; `running_jupyterlab(root)` starts
`jupyter lab` from this virtualenv on a free loopback port with a random token, waits until it
answers, and always shuts it down (process group) on exit; `open_in_chromium(...)` loads a
JupyterLab URL in headless Chromium through Playwright, waits for given CSS selectors and
returns what rendered plus a PNG screenshot.

When to use it: tests that must see what a learner sees in the browser — that the lesson
notebook renders and nbgrader's extensions load — rather than trusting the server's HTTP codes.

Expected gain: catches broken frontends (missing/disabled labextensions, notebooks JupyterLab
cannot open) that every nbclient/nbconvert based test misses.

Pitfalls: never `playwright install` (no browser downloads here): Playwright drives the system
Chromium via `executable_path`. As root Chromium needs `--no-sandbox`. The server reads no user
config: JUPYTER_CONFIG_DIR/DATA_DIR point into a temp dir, so saved workspaces or user settings
on the machine can neither open extra tabs nor change the page. Kernels live in their own
sessions (jupyter_client), so shutdown goes through the server (SIGTERM) before SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Flags that work headless as root in a container without a GPU or network.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")


def find_chromium() -> str | None:
    """Path of a Chromium binary, or None. Debian's package puts it at /usr/bin/chromium."""
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LabServer:
    url: str  # http://127.0.0.1:PORT
    token: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no server log: {exc})"

    def lab_url(self, path: str) -> str:
        """URL that opens `path` (relative to the server root) in JupyterLab, token included."""
        return f"{self.url}/lab/tree/{path}?token={self.token}"


def _jupyter_lab_command() -> list[str]:
    # The jupyter-lab next to this interpreter, so the test uses the venv's JupyterLab and its
    # sys-prefix labextensions (nbgrader's), never some other install on PATH.
    exe = Path(sys.executable).with_name("jupyter-lab")
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-m", "jupyterlab"]


def _wait_until_up(server: LabServer, timeout_s: float) -> None:
    status_url = f"{server.url}/api/status?token={server.token}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"jupyter lab exited with code {server.process.returncode} before answering; "
                f"its log ({server.log_path}) ends with:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(status_url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    raise TimeoutError(
        f"jupyter lab did not answer {server.url}/api/status within {timeout_s:.0f} s; "
        f"its log ends with:\n{server.log_tail()}"
    )


def _stop(process: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the server's process group (it then shuts its kernels down), SIGKILL if stuck."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _answer_news_prompt(config_dir: Path) -> None:
    """Answer JupyterLab's first-run "get notified about Jupyter news?" toast with "No".

    A fresh profile shows that toast over the notebook's lower right corner; declining it is
    what a learner does once, and there is no network to fetch news from anyway. Other toasts
    (errors) still show.
    """
    settings = config_dir / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}\n')


@contextlib.contextmanager
def running_jupyterlab(root: Path, startup_timeout_s: float = 60.0) -> Iterator[LabServer]:
    """JupyterLab serving `root`, shut down on exit even when the body raises."""
    with tempfile.TemporaryDirectory(prefix="effkit-lab-") as tmp:
        tmp_path = Path(tmp)
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
            JUPYTER_DATA_DIR=str(tmp_path / "data"),
            JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
            JUPYTER_PLATFORM_DIRS="1",
        )
        _answer_news_prompt(tmp_path / "config")
        port = free_port()
        token = secrets.token_hex(24)
        command = _jupyter_lab_command() + [
            "--no-browser",
            "--allow-root",  # CI runs as root
            "--ServerApp.ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",  # fail loudly instead of silently moving ports
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={root}",
            # No network here: don't let the page wait on (or toast about) update checks.
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        with _serving(command, root, env, port, token, tmp_path / "jupyter-lab.log") as server:
            _wait_until_up(server, startup_timeout_s)
            yield server


@contextlib.contextmanager
def _serving(command, root, env, port, token, log_path: Path) -> Iterator[LabServer]:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so teardown can kill it whole
        )
    try:
        yield LabServer(f"http://127.0.0.1:{port}", token, process, log_path)
    finally:
        _stop(process)


@contextlib.contextmanager
def running_make_lab(
    root: Path, env_extra: dict, startup_timeout_s: float = 90.0
) -> Iterator[LabServer]:
    """`make lab` exactly as a learner types it (the Makefile's recipe, PATH without the venv's
    bin: the test must catch a recipe that only works from an activated venv), on a free port."""
    with tempfile.TemporaryDirectory(prefix="effkit-make-lab-") as tmp:
        tmp_path = Path(tmp)
        venv_bin = str(Path(sys.executable).parent)
        path = os.pathsep.join(
            p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin
        )
        port, token = free_port(), secrets.token_hex(24)
        env = dict(
            os.environ,
            PATH=path,
            JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
            JUPYTER_DATA_DIR=str(tmp_path / "data"),
            JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
            JUPYTER_PLATFORM_DIRS="1",
            JUPYTER_TOKEN=token,  # jupyter_server reads its token from here
            **env_extra,
        )
        _answer_news_prompt(tmp_path / "config")
        args = (
            f"--no-browser --port={port} --ServerApp.ip=127.0.0.1 --ServerApp.port_retries=0 "
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"
        )
        command = ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"]
        with _serving(command, root, env, port, token, tmp_path / "make-lab.log") as server:
            _wait_until_up(server, startup_timeout_s)
            yield server


@dataclass
class PageResult:
    found: dict[str, list[str]]  # selector -> innerText of each match
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    timed_out_on: str | None = None  # first selector that never appeared
    evaluated: object = None  # what the `evaluate` script returned, once the page had loaded


def open_in_chromium(
    url: str,
    chromium: str,
    wait_for: list[str],
    collect: list[str],
    screenshot: Path,
    timeout_s: float = 120.0,
    viewport: tuple[int, int] = (1400, 1000),
    evaluate: str | None = None,
) -> PageResult:
    """Load `url`, wait for every `wait_for` selector to be visible, then read `collect`.

    Never raises on a selector timeout: it records which selector was missing and still saves
    the screenshot, so a failing test shows what the page looked like instead.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    result = PageResult(found={})
    deadline = time.monotonic() + timeout_s
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_FLAGS, timeout=90_000
        )
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            page.on("pageerror", lambda exc: result.page_errors.append(str(exc)))
            page.on(
                "console",
                lambda msg: result.console_errors.append(msg.text) if msg.type == "error" else None,
            )
            page.goto(url, wait_until="domcontentloaded", timeout=timeout_s * 1000)
            for selector in wait_for:
                left_ms = max(1_000, (deadline - time.monotonic()) * 1000)
                try:
                    page.wait_for_selector(selector, state="visible", timeout=left_ms)
                except PlaywrightTimeout:
                    result.timed_out_on = selector
                    break
            if result.timed_out_on is None:
                # Let toolbar items and cell editors settle after the last selector appeared.
                page.wait_for_timeout(750)
            for selector in collect:
                result.found[selector] = page.locator(selector).all_inner_texts()
            if evaluate is not None:  # e.g. read images' naturalWidth: wait until they loaded
                page.wait_for_load_state("load", timeout=timeout_s * 1000)
                result.evaluated = page.evaluate(evaluate)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot))
        finally:
            browser.close()
    return result


@contextlib.contextmanager
def chromium_page(chromium: str, viewport: tuple[int, int] = (1400, 1000)) -> Iterator[object]:
    """A Playwright page in headless Chromium, for tests that click through several pages; the
    page's uncaught errors collect in ``page.effkit_errors``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_FLAGS, timeout=90_000
        )
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            # Harness waits, not checks: on a 2-core host at load 6-9 JupyterLab's pages took longer
            # than Playwright's 30 s default to appear (2026-12-05); a page that never comes still fails.
            page.set_default_timeout(90_000)
            page.effkit_errors = []
            page.on("pageerror", lambda exc: page.effkit_errors.append(str(exc)))
            yield page
        finally:
            browser.close()
