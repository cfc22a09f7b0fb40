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


def _pins() -> dict[str, list[tuple[str, str | None]]]:
    """constraints.txt as {canonical name: [(version, marker or None), ...]}."""
    from packaging.utils import canonicalize_name

    pins: dict[str, list[tuple[str, str | None]]] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        found = re.match(r"([A-Za-z0-9._-]+)==(\S+)\s*(?:;\s*(.+))?$", line.strip())
        if found:
            pins.setdefault(canonicalize_name(found[1]), []).append((found[2], found[3]))
    return pins


def test_constraints_pin_every_declared_requirement_within_its_bounds():
    """constraints.txt (`make constraints`) resolves what pyproject declares: each requirement of
    the runtime and the course, dev and cohort extras is pinned, inside its floor and cap."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    pins = _pins()
    for spec in project["dependencies"] + extras["course"] + extras["dev"] + extras["cohort"]:
        req = Requirement(spec)
        versions = pins.get(canonicalize_name(req.name))
        assert versions, f"constraints.txt pins no {req.name}: run `make constraints`"
        for version, _marker in versions:
            assert req.specifier.contains(version, prereleases=True), (
                f"{req.name}=={version}: {spec}"
            )


def test_every_install_takes_the_constraints_and_ruff_is_pinned_exactly():
    makefile = (ROOT / "Makefile").read_text()
    installs = [ln for ln in makefile.splitlines() if "pip install" in ln and "-e " in ln]
    assert installs and all("$(PIN)" in ln for ln in installs), installs
    assert "PIN    := -c constraints.txt" in makefile
    (ruff,) = [d for d in _pyproject()["project"]["optional-dependencies"]["dev"] if "ruff" in d]
    assert ruff == f"ruff=={_pins()['ruff'][0][0]}"


def test_the_gpu_lease_takes_its_versions_from_the_constraints():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gpu_lease_wheels", ROOT / "benchmarks" / "gpu_lease_wheels.py"
    )
    wheels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wheels)
    pins = _pins()
    for pin in wheels.pins():
        name, version = pin.split("==")
        assert version in [v for v, _ in pins[name.lower().replace("_", "-")]], pin


def test_what_the_code_imports_is_declared():
    """A package effkit, the grader or a lesson imports by name is a declared requirement, not
    something another package happens to bring (it may stop bringing it)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    declared = {
        canonicalize_name(Requirement(d).name)
        for d in project["dependencies"] + extras["course"] + extras["dev"]
    }
    module_to_package = {
        "safetensors": "safetensors",
        "huggingface_hub": "huggingface-hub",
        "google.protobuf": "protobuf",
        "datasets": "datasets",
        "onnxruntime": "onnxruntime",
    }
    sources = [p for d in ("effkit", "grader", "notebooks") for p in (ROOT / d).rglob("*.py")]
    for module, package in module_to_package.items():
        pattern = re.compile(rf"^\s*(from|import) {re.escape(module)}\b", re.M)
        users = [p.name for p in sources if pattern.search(p.read_text())]
        assert users, f"nothing imports {module} any more: drop it from this list"
        assert package in declared, f"{users} import {module}: declare {package}"
