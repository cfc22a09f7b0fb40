"""The conda environment, the pip metadata and the layout stay consistent."""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_matches_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    project = _pyproject()["project"]
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    assert python.replace("python", "") == project["requires-python"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    (spec,) = [p for p in pip if "." in p]
    extras = set(re.search(r"\[(.*)\]", spec).group(1).split(","))
    # every extra a learner needs is installed by conda users too
    assert extras == set(project["optional-dependencies"]) - {"plot"}
    assert {"course", "dev"} <= extras


def test_runtime_dependencies_stay_small():
    names = {re.split(r"[<>=\[ ]", d)[0] for d in _pyproject()["project"]["dependencies"]}
    # pydantic: the grader's typed, versioned GradingReport (issue 54), meant for every frontend
    assert names == {"torch", "numpy", "tqdm", "pydantic"}


def test_torch_is_not_pinned_to_a_local_cpu_wheel():
    text = (ROOT / "pyproject.toml").read_text()
    assert "+cpu" not in text and "torch==" not in text


def test_layout_folders_each_explain_themselves():
    for folder in ("notebooks", "exercises", "solutions", "grader", "effkit", "tests"):
        readme = ROOT / folder / "README.md"
        assert readme.is_file(), f"{folder}/ needs a README.md"
        assert len(readme.read_text().split()) >= 20


def test_readme_quickstart_is_two_commands_and_ci_calls_the_test_command():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", quick, re.S).group(1)
    commands = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    assert commands == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_declared_torch_floor_is_the_one_effkit_enforces(monkeypatch):
    """pyproject's `torch>=X.Y` is effkit.MIN_TORCH (what `make test-oldest-torch` installs);
    below it `import effkit` fails saying why, a CUDA build's local tag and newer minors pass."""
    import importlib.metadata

    import pytest

    import effkit

    (floor,) = [d for d in _pyproject()["project"]["dependencies"] if d.startswith("torch")]
    assert floor == "torch>={}.{}".format(*effkit.MIN_TORCH)
    for found, ok in (
        ("2.4.1+cu121", False),
        ("2.5.1", False),
        ("2.6.0", True),
        ("2.11.0+cu130", True),
        ("2.15.0+cu132", True),
    ):
        monkeypatch.setattr(importlib.metadata, "version", lambda _name, found=found: found)
        if ok:
            effkit._check_torch()
        else:
            with pytest.raises(
                ImportError, match=f"needs torch >= 2.6, found torch {re.escape(found)}"
            ):
                effkit._check_torch()
