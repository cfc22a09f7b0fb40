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
    assert names == {"torch", "numpy", "tqdm"}


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
