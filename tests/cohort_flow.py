"""What a learner and an instructor do in the browser on a cohort's JupyterHub (test helper).

Each function is one step a person takes, driven through headless Chromium (Playwright on the
system's Chromium): log in, open nbgrader's Assignment List, fetch, fill in a solution, validate,
run a cell, submit, fetch feedback; and in formgrader: collect, autograde, generate and release
feedback. A step records its time and a screenshot in ``Steps``, so a failure shows the page.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

SOLUTION = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$\n?", re.M)
HIDDEN = re.compile(r"^\s*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\s*$\n?", re.M | re.S)


@dataclass
class Steps:
    """Times and screenshots of every step, written to ``folder/steps.json``."""

    folder: Path
    done: list[dict] = field(default_factory=list)

    def record(self, page, name: str, started: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        shot = self.folder / f"{len(self.done) + 1:02d}-{name}.png"
        page.screenshot(path=str(shot))
        self.done.append(
            {"step": name, "seconds": round(time.monotonic() - started, 1), "screenshot": str(shot)}
        )
        (self.folder / "steps.json").write_text(json.dumps(self.done, indent=1))


def login(page, url: str, user: str, password: str, next_path: str = "") -> None:
    page.goto(f"{url}/hub/login" + (f"?next={next_path}" if next_path else ""))
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")


def logout(page, url: str) -> None:
    page.goto(f"{url}/hub/logout")
    page.wait_for_selector("#username_input", timeout=60_000)


def open_lab(page, url: str, user: str, password: str) -> None:
    login(page, url, user, password)
    page.wait_for_url("**/lab**", timeout=240_000)  # the hub spawns the learner's server
    page.wait_for_selector("#jp-main-dock-panel .lm-TabBar-tab", timeout=180_000)


def assignment_list(page) -> None:
    """nbgrader's Assignment List panel (menu Nbgrader > Assignment List), loaded."""
    page.get_by_text("Nbgrader", exact=True).first.click()
    page.get_by_text("Assignment List", exact=True).first.click()
    page.locator("#released_assignments_list_loading").wait_for(state="hidden", timeout=60_000)
    page.locator("#fetched_assignments_list_loading").wait_for(state="hidden", timeout=60_000)


def _row(page, list_id: str, name: str):
    return page.locator(f"#{list_id} .list_item").filter(
        has=page.locator(".item_name", has_text=re.compile(rf"^\s*{name}\s*$"))
    )


def fetch(page, aid: str) -> None:
    if _row(page, "fetched_assignments_list", aid).count():
        return  # fetched in an earlier session
    _row(page, "released_assignments_list", aid).get_by_role("button", name="Fetch").click()
    _row(page, "fetched_assignments_list", aid).first.wait_for(timeout=60_000)


def submit(page, aid: str) -> None:
    _row(page, "fetched_assignments_list", aid).get_by_role("button", name="Submit").first.click()
    _row(page, "submitted_assignments_list", aid).first.wait_for(timeout=60_000)


def _api(page, method: str, path: str, body: dict | None = None):
    """The learner's own Jupyter server's REST API, from the logged-in page (XSRF included)."""
    return page.evaluate(
        """async ([method, path, body]) => {
            const base = document.querySelector('body').dataset.baseUrl
                || JSON.parse(document.getElementById('jupyter-config-data').textContent).baseUrl;
            const xsrf = (document.cookie.split('; ').find(c => c.startsWith('_xsrf=')) || '').slice(6);
            const r = await fetch(base + path, {method, headers: {'Content-Type': 'application/json',
                'X-XSRFToken': xsrf}, body: body ? JSON.stringify(body) : undefined});
            return {status: r.status, body: r.status < 300 ? await r.json() : await r.text()};
        }""",
        [method, path, body],
    )


def fill_in(page, path: str, solution: Path) -> int:
    """Put the reference solution's code into the fetched notebook's solution cells, as a learner
    who wrote them would have saved it (the locked cells stay as fetched). Returns cells filled."""
    got = _api(page, "GET", f"api/contents/{path}?content=1")
    assert got["status"] == 200, got
    nb = got["body"]["content"]
    ref = json.loads(solution.read_text())
    answers = {
        c["metadata"]["nbgrader"]["grade_id"]: HIDDEN.sub(
            "", SOLUTION.sub("", "".join(c["source"]))
        )
        for c in ref["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }
    filled = 0
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell["source"] = answers[gid]
            filled += 1
    put = _api(
        page, "PUT", f"api/contents/{path}", {"type": "notebook", "format": "json", "content": nb}
    )
    assert put["status"] in (200, 201), put
    return filled


def open_notebook(page, path: str) -> None:
    page.goto(page.url.split("/lab")[0] + f"/lab/tree/{path}")
    page.wait_for_selector("#jp-main-dock-panel .jp-NotebookPanel .jp-Cell", timeout=120_000)
    page.wait_for_selector(".jp-NotebookPanel-toolbar .validate-button", timeout=60_000)


def validate(page, timeout_s: float = 300) -> str:
    """Click nbgrader's Validate button; returns the results dialog's text."""
    page.locator(".jp-NotebookPanel-toolbar .validate-button").first.click()
    dialog = page.locator(".jp-Dialog-content", has_text="Validation Results")
    dialog.wait_for(timeout=timeout_s * 1000)
    return dialog.inner_text()


def close_dialog(page) -> None:
    page.locator(".jp-Dialog-content .jp-mod-accept").first.click()


def run_cell(page, text: str, wait_for: str, timeout_s: float = 300) -> str:
    """Run the code cell whose source contains ``text``; wait until its output shows ``wait_for``."""
    cell = page.locator(".jp-NotebookPanel .jp-CodeCell", has_text=text).first
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    output = cell.locator(".jp-OutputArea")
    output.filter(has_text=wait_for).wait_for(timeout=timeout_s * 1000)
    return output.inner_text()


def formgrader(page, url: str, user: str, password: str) -> None:
    """The instructor logs in and lands on formgrader (the course's hub service)."""
    login(page, url, user, password, "/services/effkit/formgrader")
    page.get_by_text("Manage Assignments").first.wait_for(timeout=180_000)
    page.locator("tr", has_text="lesson1").first.wait_for(timeout=60_000)


def _modal_ok(page, timeout_s: float) -> str:
    """Wait for formgrader's result dialog, read it, press OK."""
    modal = page.locator(".modal-dialog").filter(has=page.locator(".modal-footer button"))
    modal.first.wait_for(timeout=timeout_s * 1000)
    text = modal.first.inner_text()
    modal.first.locator(".modal-footer button").first.click()
    modal.first.wait_for(state="hidden", timeout=30_000)
    return text


def _assignment_row(page, aid: str):
    return page.locator("tr").filter(has=page.locator(f'td.name[data-order="{aid}"]')).first


def collect(page, aid: str) -> str:
    _assignment_row(page, aid).locator("td.collect a").click()
    return _modal_ok(page, 120)


def autograde(page, url: str, aid: str, learners: list[str], timeout_s: float = 900) -> dict:
    """Press autograde for each learner's submission; returns each one's score and the dialog."""
    page.goto(f"{url}/services/effkit/formgrader/manage_submissions/{aid}")
    scores = {}
    for who in learners:
        row = page.locator("tr").filter(has=page.locator(f'td.student-id[data-order="{who}"]'))
        row.first.wait_for(timeout=60_000)
        row.first.locator("td.autograde a").click()
        said = _modal_ok(page, timeout_s)  # formgrader says "Success" or shows nbgrader's error
        row.filter(has=page.locator("td.status", has_text="graded")).first.wait_for(timeout=60_000)
        scores[who] = (row.first.locator("td.score").inner_text().strip() or None, said)
    return scores


def autograde_refused(page, url: str, aid: str, who: str, timeout_s: float = 300) -> str:
    """Press autograde for a submission formgrader must refuse; returns the error dialog's whole
    text (its log and error sections included, shown or folded)."""
    page.goto(f"{url}/services/effkit/formgrader/manage_submissions/{aid}")
    row = page.locator("tr").filter(has=page.locator(f'td.student-id[data-order="{who}"]'))
    row.first.wait_for(timeout=60_000)
    row.first.locator("td.autograde a").click()
    modal = page.locator(".modal-dialog").filter(has=page.locator(".modal-footer button"))
    modal.first.wait_for(timeout=timeout_s * 1000)
    text = modal.first.text_content()
    modal.first.locator(".modal-footer button").first.click()
    modal.first.wait_for(state="hidden", timeout=30_000)
    return text


def put_text(page, path: str, text: str) -> None:
    """Save ``text`` as the file ``path`` (a learner renaming notes to .ipynb, say)."""
    put = _api(
        page, "PUT", f"api/contents/{path}", {"type": "file", "format": "text", "content": text}
    )
    assert put["status"] in (200, 201), put


def feedback(page, url: str, aid: str) -> tuple[str, str]:
    """Generate, then release, every learner's feedback for ``aid``."""
    page.goto(f"{url}/services/effkit/formgrader/manage_assignments")
    _assignment_row(page, aid).wait_for(timeout=60_000)
    _assignment_row(page, aid).locator("td.generate-feedback a").click()
    made = _modal_ok(page, 300)
    _assignment_row(page, aid).locator("td.release-feedback a").click()
    released = _modal_ok(page, 120)
    return made, released


def read_feedback(page, aid: str) -> str:
    """In the Assignment List: Fetch Feedback, "view feedback" (the file browser goes to it), then
    open the feedback page as a browser tab would; returns its text."""
    row = _row(page, "submitted_assignments_list", aid).first
    row.get_by_role("button", name="Fetch Feedback").click()
    link = _row(page, "submitted_assignments_list", aid).first.get_by_text("view feedback")
    link.wait_for(timeout=60_000)
    link.click()
    page.locator(".jp-DirListing-item", has_text=f"{aid}.html").first.wait_for(timeout=60_000)
    listing = _api(page, "GET", f"api/contents/{aid}/feedback")
    assert listing["status"] == 200, listing
    newest = max(item["name"] for item in listing["body"]["content"])
    page.goto(page.url.split("/lab")[0] + f"/files/{aid}/feedback/{newest}/{aid}.html")
    page.wait_for_load_state("load", timeout=60_000)
    return page.inner_text("body")
