"""The worker's file view built by bubblewrap: an allow-list, not the host minus masked paths (issue 52 §2).

Another readable checkout of the course on the machine (an instructor's clone, a backup) handed lesson 4's
reference gradient and lesson 9's ``kd_loss`` to a learner's worker by path: the ``unshare`` view replaces
only the repository root and the copies the import system knows. A learner's ``choose_recipe`` (lesson 4's
probe worker, sandboxed as in a grading) loads both from a copy under /srv and lists the root it sees.
"""

import os
import shutil
import uuid
from pathlib import Path

import pytest

from grader.sandbox import bwrap_view
from grader.sandbox.launch import is_root
from grader.sandbox.learner_view import REPO_ROOT
from grader.sandbox.probe import ProbeSession

ATTACK = """
def choose_recipe(micro_batch, base_batch, base_lr, budget_samples):
    import importlib.util, os
    got = {"loaded": [], "top": sorted(os.listdir("/"))}
    for name, path, attr in LOADS:
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            getattr(mod, attr)
            got["loaded"].append(attr)
        except BaseException:
            pass
    return got
"""


@pytest.fixture
def backup_checkout():
    """A copy of the course's grader and effkit under /srv, readable by everyone (an instructor's clone)."""
    copy = Path("/srv") / f"effkit-backup-{uuid.uuid4().hex[:8]}"
    for part in ("grader", "effkit"):
        shutil.copytree(REPO_ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    copy.chmod(0o755)
    try:
        yield copy
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _attack(copy: Path) -> dict:
    loads = [
        (
            "stolen_accum",
            str(copy / "grader/assignments/lesson4/accum_checks.py"),
            "reference_grad",
        ),
        ("stolen_distill", str(copy / "effkit/distill.py"), "kd_loss"),
    ]
    with ProbeSession(
        "grader.assignments.lesson4.probes",
        [("setup", "import os\n")],
        [("recipe", ATTACK.replace("LOADS", repr(loads)))],
        ["choose_recipe"],
    ) as s:
        r = s.call("recipe", 120, micro_batch=8, base_batch=64, base_lr=0.1, budget_samples=640)
        assert r.ok, r.failure
        return r.data["recipe"]


@pytest.mark.skipif(not is_root() or not shutil.which("bwrap"), reason="needs root and bwrap")
@pytest.mark.parametrize(
    "view",
    [
        "bwrap",
        pytest.param(
            "unshare",
            marks=pytest.mark.xfail(
                strict=True, reason="the unshare view shows the host minus masked paths (residual)"
            ),
        ),
    ],
)
def test_another_checkout_of_the_course_is_out_of_a_learners_reach(
    view, backup_checkout, monkeypatch
):
    monkeypatch.setenv("EFFKIT_SANDBOX_VIEW", view)
    got = _attack(backup_checkout)
    assert got["loaded"] == [], f"loaded from {backup_checkout}: {got['loaded']}"
    # the root holds the system folders and the first folder of the Python and the repository only
    allowed = {Path(p).name for p in bwrap_view.SYSTEM} | {"proc", "dev", "tmp"}
    allowed |= {Path(p).resolve().parts[1] for p in (REPO_ROOT, *bwrap_view.prefixes())}
    assert set(got["top"]) <= allowed, sorted(set(got["top"]) - allowed)


def test_a_learners_view_binds_files_one_by_one_and_masks_withheld_answers():
    args, fds = bwrap_view.view_args(
        lesson="lesson7",
        grader_only=False,
        gpu_nodes=[],
        tmp_mb=64,
        hidden=[],
        expose=None,
        exposed_at="/tmp/grader-inputs",
        state_dir=None,
        state_at="/tmp/work/state",
    )
    try:
        data = [args[i + 2] for i, a in enumerate(args) if a == "--ro-bind-data"]
        assert sorted(data) == sorted(
            str(REPO_ROOT / p)
            for p in ("effkit/length_buckets.py", "effkit/workloads/bert/batching.py")
        )
        binds = [args[i + 1] for i, a in enumerate(args) if a in ("--ro-bind", "--bind")]
        assert str(REPO_ROOT) not in binds  # never the repository whole for learner code
        for private in (
            "tests",
            "solutions",
            ".git",
            "course",
            "grader/assignments/lesson4/checks.py",
        ):
            assert not any(b.startswith(str(REPO_ROOT / private)) for b in binds), private
        assert not any("nvidia" in a for a in args)
        # every folder above a bound path is made 0755 before it (else bwrap's own mode, 0700 here)
        first = args.index(str(REPO_ROOT / "grader" / "__init__.py"))
        made = [
            args[i + 3] for i in range(first) if args[i : i + 3] == ["--perms", "0755", "--dir"]
        ]
        assert str(REPO_ROOT) in made and str(REPO_ROOT / "grader") in made
    finally:
        for fd in fds:
            os.close(fd)
