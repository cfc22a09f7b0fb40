"""CIFAR-10 on disk: load it through torchvision, or generate a synthetic stand-in offline.

`load_cifar` reads the official pickles through ``torchvision.datasets.CIFAR10`` (md5-checked) with errors
that say how to get the data; `download_cifar` fetches it; `make_synthetic_cifar` writes a small learnable set
in the same format (its own checksums), for tests and ``smoke``: its accuracies say nothing about CIFAR-10.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import numpy as np
from torchvision.datasets import CIFAR10

from effkit.workloads.cifar.colour import _hsv_to_rgb
from effkit.workloads.cifar.hard import DIFFICULTIES, hard_images

# Per-channel mean/std of the CIFAR-10 training images, as fractions of 255.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
LABEL_NAMES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
BASE_FOLDER = CIFAR10.base_folder  # "cifar-10-batches-py"
MANIFEST = "effkit_synthetic.json"  # marks (and checksums) a synthetic dataset

HOW_TO_GET = (
    'To get real CIFAR-10, run on a machine with internet access: python -c "import torchvision; '
    "torchvision.datasets.CIFAR10('DIR', download=True)\", then pass the folder that contains "
    f"{BASE_FOLDER}/ as data_dir (--data DIR; lessons: set $EFFKIT_CIFAR_DIR). Offline, use the "
    "'smoke' profile, which generates a synthetic dataset in the same format."
)


class CifarDataError(RuntimeError):
    """The CIFAR-10 folder is missing, empty, incomplete or corrupt."""


def data_home() -> Path:
    """Cache folder for this workload: ``$EFFKIT_DATA/cifar`` or ``~/.cache/effkit/cifar``."""
    root = os.environ.get("EFFKIT_DATA") or Path.home() / ".cache" / "effkit"
    return Path(root).expanduser() / "cifar"


def is_synthetic(root: str | Path) -> bool:
    return (Path(root) / BASE_FOLDER / MANIFEST).is_file()


def has_cifar(root: str | Path) -> bool:
    """True when ``root`` holds a ``cifar-10-batches-py`` folder (not yet validated)."""
    return (Path(root) / BASE_FOLDER).is_dir()


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_cifar(root: str | Path, train: bool = True) -> CIFAR10:
    """The train or test split as a ``torchvision.datasets.CIFAR10`` with ``transform=None``.

    ``.data`` is uint8 N x 32 x 32 x 3 (HWC) and ``.targets`` a list of ints, as torchvision
    returns them. Raises :class:`CifarDataError` naming the folder when it cannot be read.
    """
    root = Path(root).expanduser()
    base = root / BASE_FOLDER
    if not root.exists():
        raise CifarDataError(f"CIFAR-10 data folder {root} does not exist. {HOW_TO_GET}")
    if not base.is_dir():
        hint = ""
        if root.name == BASE_FOLDER:
            hint = f" You passed the {BASE_FOLDER} folder itself: pass its parent, {root.parent}."
        raise CifarDataError(f"no {BASE_FOLDER}/ folder in {root}.{hint} {HOW_TO_GET}")
    try:
        if is_synthetic(root):
            return _load_synthetic(root, train)
        return CIFAR10(str(root), train=train, download=False)
    except RuntimeError as err:  # torchvision's "Dataset not found or corrupted"
        raise CifarDataError(f"{_diagnose(root)} ({err}). {HOW_TO_GET}") from err
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, json.JSONDecodeError) as err:
        raise CifarDataError(
            f"could not read the CIFAR-10 files in {base}: {type(err).__name__}: {err}. "
            f"Delete the folder and get the data again. {HOW_TO_GET}"
        ) from err


def _load_synthetic(root: Path, train: bool) -> CIFAR10:
    # torchvision verifies every file against the md5 of the *official* files, which synthetic
    # files cannot match. Rather than skip the check, we give this one dataset object the
    # checksums our generator recorded, as instance attributes set before torchvision's own
    # __init__ runs: the integrity check still runs (a truncated file is still caught) and
    # every byte is read by torchvision's code. Instance attributes, not a subclass, so the
    # object stays a plain, picklable CIFAR10 (DataLoader workers under "spawn" pickle it).
    manifest = json.loads((root / BASE_FOLDER / MANIFEST).read_text())
    md5 = manifest["md5"]
    dataset = CIFAR10.__new__(CIFAR10)
    dataset.train_list = [[name, md5[name]] for name, _ in CIFAR10.train_list]
    dataset.test_list = [[name, md5[name]] for name, _ in CIFAR10.test_list]
    dataset.meta = dict(CIFAR10.meta, md5=md5[CIFAR10.meta["filename"]])
    CIFAR10.__init__(dataset, str(root), train=train, download=False)
    return dataset


def _diagnose(root: Path) -> str:
    """Say which files are missing or fail their checksum."""
    base = root / BASE_FOLDER
    names = [n for n, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]
    missing = [n for n in names if not (base / n).is_file()]
    if len(missing) == len(names):
        return f"{base} is empty or holds no CIFAR-10 files"
    if missing:
        return f"{base} is incomplete: missing {', '.join(missing)}"
    return f"files in {base} fail their md5 check (corrupt, or not the official python version)"


def download_cifar(root: str | Path) -> Path:
    """Download and extract real CIFAR-10 into ``root`` (170 MB) unless it is already there."""
    root = Path(root).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    try:
        CIFAR10(str(root), train=True, download=True)
    except Exception as err:  # URLError, timeouts, bad archive: all mean "no data here"
        raise CifarDataError(
            f"could not download CIFAR-10 into {root}: {type(err).__name__}: {err}. {HOW_TO_GET}"
        ) from err
    return root


# ---------------------------------------------------------------------------------------------
# Synthetic data in the official format
# ---------------------------------------------------------------------------------------------


class _Py2Str(bytes):
    """A Python-2 ``str`` inside a pickle: loads as ``str`` (encoding="latin1", torchvision)
    and as ``bytes`` (encoding="bytes", the CIFAR website's snippet) - like the official files."""


class _Py2Pickler(pickle._Pickler):  # the pure-Python pickler lets us emit one extra opcode
    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2str(self, obj: _Py2Str) -> None:
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + bytes(obj))
        else:
            self.write(pickle.BINSTRING + n.to_bytes(4, "little") + bytes(obj))

    dispatch[_Py2Str] = _save_py2str


def _py2(value: object) -> object:
    """Turn str keys/values into Python-2 strings, recursively through dicts and lists."""
    if isinstance(value, str):
        return _Py2Str(value.encode("latin1"))
    if isinstance(value, dict):
        return {_py2(k): _py2(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_py2(v) for v in value]
    return value


def _write_pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        _Py2Pickler(f, protocol=2).dump(_py2(obj))


def synthetic_images(n: int, seed: int, difficulty: str = "easy") -> tuple[np.ndarray, np.ndarray]:
    """``n`` labelled 32x32 RGB images (uint8 N x 32 x 32 x 3) with a learnable class signal.

    ``difficulty="hard"``: :func:`effkit.workloads.cifar.hard.hard_images` instead (full-size
    offline runs); "easy", described here, is what smoke, cpu and the tests train on.

    Class ``c`` paints one of five patterns (``c % 5``: horizontal or vertical stripes, checks,
    disc, ring, at random frequency, phase and position) in a colour of hue ``36 * c`` degrees
    (+-30 degrees of jitter) over a random background, with random contrast and pixel noise.
    Colour alone separates neighbouring classes only partly and the pattern alone not at all
    (``c`` and ``c + 5`` share it), so a net must learn both; every cue survives the random crops
    and flips of CIFAR augmentation. Low-contrast images are genuinely ambiguous, so accuracy
    plateaus below 100% instead of depending on luck.
    """
    if difficulty != "easy":
        if difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
        return hard_images(n, seed)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % 10)  # balanced classes, shuffled
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    pattern = labels % 5
    masks = np.empty((n, 32, 32), np.float32)
    for p in range(5):
        idx = np.flatnonzero(pattern == p)
        m = len(idx)
        freq = rng.uniform(2.0, 4.0, (m, 1, 1)) * 2 * np.pi / 32
        phase = rng.uniform(0, 2 * np.pi, (m, 1, 1))
        cy, cx = rng.uniform(10, 22, (2, m, 1, 1))
        radius = np.hypot(yy - cy, xx - cx)
        if p == 0:
            mask = np.sin(freq * yy + phase) > 0
        elif p == 1:
            mask = np.sin(freq * xx + phase) > 0
        elif p == 2:
            mask = np.sin(freq * yy + phase) * np.sin(freq * xx + phase) > 0
        elif p == 3:
            mask = radius < rng.uniform(6, 11, (m, 1, 1))
        else:
            inner = rng.uniform(4, 8, (m, 1, 1))
            mask = (radius > inner) & (radius < inner + rng.uniform(2.5, 4, (m, 1, 1)))
        masks[idx] = mask
    hue = (labels * 36.0 + rng.uniform(-30, 30, n)) % 360
    fg = _hsv_to_rgb(hue, rng.uniform(0.5, 1.0, n), rng.uniform(0.6, 1.0, n))
    bg = rng.uniform(0.0, 0.6, (n, 3)) * rng.uniform(0.3, 1.0, (n, 1))  # dim, random colour
    contrast = rng.uniform(0.02, 1.0, (n, 1, 1, 1))  # the faintest ~10% are near-guesses
    alpha = masks[..., None] * contrast
    images = bg[:, None, None, :] * (1 - alpha) + fg[:, None, None, :] * alpha
    images += rng.normal(0, 0.08, images.shape)
    images = np.clip(images * 255 + 0.5, 0, 255).astype(np.uint8)
    return images, labels.astype(np.int64)


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def make_synthetic_cifar(
    root: str | Path,
    n_train: int = 5000,
    n_test: int = 1000,
    seed: int = 0,
    difficulty: str = "easy",
):
    """Write a synthetic CIFAR-10 into ``root/cifar-10-batches-py`` in the official format.

    Five ``data_batch_*`` files and a ``test_batch`` (pickled dicts of ``data``: uint8
    N x 3072 with the R, G and B planes of each image row-major, ``labels``, ``batch_label``,
    ``filenames``) and ``batches.meta``, plus an ``effkit_synthetic.json`` manifest with the
    files' md5s. Train and test images are drawn independently (different seeds). Written to a
    temporary folder and renamed into place, so an interrupted run leaves nothing half-written.
    ``difficulty``: see `synthetic_images` (recorded in the manifest). Returns ``root``.
    """
    if n_train < 5 or n_test < 1:
        raise ValueError(
            f"need n_train >= 5 (five batch files) and n_test >= 1, got {n_train}, {n_test}"
        )
    root = Path(root).expanduser()
    target = root / BASE_FOLDER
    if target.exists():
        raise FileExistsError(f"{target} already exists; delete it or choose another root")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".effkit-tmp-", dir=root))
    try:
        base = tmp / BASE_FOLDER
        base.mkdir()
        splits = [
            ("train", *synthetic_images(n_train, seed, difficulty)),
            ("test", *synthetic_images(n_test, seed + 10_000, difficulty)),
        ]
        for split, images, labels in splits:
            flat = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)  # RGB planes
            names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
            chunks = np.array_split(np.arange(len(images)), len(names))
            for i, (name, rows) in enumerate(zip(names, chunks, strict=True)):
                kind = "training" if split == "train" else "testing"
                _write_pickle(
                    base / name,
                    {
                        "batch_label": f"{kind} batch {i + 1} of {len(names)}",
                        "labels": [int(v) for v in labels[rows]],
                        "data": np.ascontiguousarray(flat[rows]),
                        "filenames": [f"synthetic_{split}_{r:05d}.png" for r in rows],
                    },
                )
        _write_pickle(
            base / "batches.meta",
            {
                "num_cases_per_batch": -(-n_train // 5),
                "label_names": list(LABEL_NAMES),
                "num_vis": 3072,
            },
        )
        manifest = {
            "generator": "effkit.workloads.cifar.make_synthetic_cifar",
            "n_train": n_train,
            "n_test": n_test,
            "seed": seed,
            **({} if difficulty == "easy" else {"difficulty": difficulty}),  # easy: as before
            "md5": {p.name: _md5(p) for p in sorted(base.iterdir())},
        }
        (base / MANIFEST).write_text(json.dumps(manifest, indent=1))
        try:
            base.rename(target)
        except OSError:
            if not target.exists():  # lost no race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
