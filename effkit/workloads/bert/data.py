"""SST-2 data: the GLUE TSV loader, a Hugging Face hub fallback, and a synthetic look-alike.

`load_sst2(dir)` reads and checks ``train/dev/test.tsv`` (``sentence<TAB>label``); `download_sst2_from_hub`
writes the hub's copy in that layout and `make_synthetic_sst2` a learnable stand-in for tests and ``smoke``.
Here ``test.tsv`` is GLUE's labelled dev set and ``dev.tsv`` a leak-free slice of GLUE train
(:mod:`effkit.workloads.bert.split`). Never parse these files with ``csv`` quoting: sentences contain quotes.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from effkit.workloads.bert.split import split_by_sentence

SPLITS = ("train", "dev", "test")
HEADER = "sentence\tlabel"
GET_DATA_HINT = (
    "Online, the course extra's `datasets` downloads GLUE SST-2 once into the cache; offline, set "
    "EFFKIT_SST2_DIR to a folder of its TSVs (GLUE's own SST-2 folder from "
    "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip, or train.tsv/dev.tsv/test.tsv with header "
    "'sentence<TAB>label'), or use profile='smoke', which generates synthetic data in that format."
)
# GLUE on the Hugging Face hub (the legacy name "glue" redirects there): parquet files, ~3 MB
HUB_DATASET = ("nyu-mll/glue", "sst2")


class Sst2Unavailable(RuntimeError):
    """SST-2 is neither on disk nor downloadable here; the message is the one-line reason."""


@dataclass
class Sst2Split:
    """One split: raw sentences and 0/1 labels (1 = positive), plus where they came from."""

    texts: list[str]
    labels: list[int]
    source: str

    def __len__(self) -> int:
        return len(self.texts)


def cache_root() -> Path:
    """Where generated and downloaded BERT data lives: ``$EFFKIT_DATA/bert`` or ~/.cache/effkit/bert."""
    root = os.environ.get("EFFKIT_DATA") or Path.home() / ".cache" / "effkit"
    return Path(root).expanduser() / "bert"


def read_sst2_tsv(path: str | Path) -> Sst2Split:
    """Read one GLUE SST-2 TSV file, failing loudly (file and line number) on any bad row."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SST-2 file {path} does not exist. {GET_DATA_HINT}")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise ValueError(
            f"{path} is empty; expected the header {HEADER!r} and rows. {GET_DATA_HINT}"
        )
    header = lines[0].strip()
    if header.lower() == "index\tsentence":
        raise ValueError(
            f"{path}: this is the unlabeled official GLUE test set (header 'index<TAB>sentence'); "
            "use the labeled GLUE dev set as test.tsv instead."
        )
    if header != HEADER:
        raise ValueError(f"{path}:1: expected the header {HEADER!r}, found {lines[0][:80]!r}")
    texts: list[str] = []
    labels: list[int] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue  # a trailing blank line is harmless
        columns = line.split("\t")
        if len(columns) != 2:
            raise ValueError(
                f"{path}:{number}: expected 2 tab-separated columns (sentence, label), found "
                f"{len(columns)}: {line[:80]!r}"
            )
        sentence, label = columns[0].strip(), columns[1].strip()
        if label not in ("0", "1"):
            raise ValueError(f"{path}:{number}: label must be 0 or 1, found {label!r}")
        if not sentence:
            raise ValueError(f"{path}:{number}: empty sentence")
        texts.append(sentence)
        labels.append(int(label))
    if not texts:
        raise ValueError(f"{path} has a header but no rows. {GET_DATA_HINT}")
    return Sst2Split(texts, labels, str(path))


def check_sst2_dir(data_dir: str | Path) -> Path:
    """Return ``data_dir`` as a Path after checking it holds all three TSV files."""
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise FileNotFoundError(f"SST-2 directory {data_dir} does not exist. {GET_DATA_HINT}")
    missing = [f"{s}.tsv" for s in SPLITS if not (data_dir / f"{s}.tsv").is_file()]
    if missing:
        raise FileNotFoundError(
            f"SST-2 directory {data_dir} lacks {', '.join(missing)}. {GET_DATA_HINT}"
        )
    return data_dir


def load_sst2(data_dir: str | Path, splits: tuple[str, ...] = SPLITS) -> dict[str, Sst2Split]:
    """Load the named splits from a GLUE SST-2 directory."""
    data_dir = check_sst2_dir(data_dir)
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"unknown SST-2 split(s) {unknown}; choose from {SPLITS}")
    return {s: read_sst2_tsv(data_dir / f"{s}.tsv") for s in splits}


def _write_tsv(path: Path, rows: list[tuple[str, int]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        f.write(HEADER + "\n")
        for sentence, label in rows:
            clean = " ".join(sentence.split())  # no tabs or newlines may leak into a row
            f.write(f"{clean}\t{int(label)}\n")


def _publish(tmp: Path, dest: Path) -> Path:
    """Move a finished temp dir into place atomically, so a crash never leaves half a data set."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(dest)
    except OSError:  # another process won the race; its copy is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def download_sst2_from_hub(dest: str | Path, seed: int = 0) -> Path:
    """Fetch GLUE SST-2 from the Hugging Face hub once and write it as TSVs under ``dest``.

    The hub's 67,349 train rows (parse-tree phrases) are split by source sentence, 90/10 with a
    fixed seed, into train.tsv/dev.tsv with no dev phrase occurring inside a train phrase (see
    :mod:`effkit.workloads.bert.split`); its labeled validation set becomes test.tsv, matching the
    offline copy used in this course. `datasets` (the course extra) downloads into a folder beside
    ``dest`` with its own progress bars, removed once the TSVs are written. Raises
    :class:`Sst2Unavailable` with a one-line reason when it cannot.
    """
    dest = Path(dest).expanduser()
    if all((dest / f"{s}.tsv").is_file() for s in SPLITS):
        return dest
    try:
        from datasets import load_dataset  # the course extra brings it; effkit's core does not
    except ImportError as err:
        raise Sst2Unavailable(
            f"SST-2 is not at {dest} and the `datasets` package that downloads it is not "
            f"installed (pip install -e '.[course]' brings it). {GET_DATA_HINT}"
        ) from err
    from effkit.workloads.bert.pretrained import _hub_reachable

    name, config = HUB_DATASET
    if not _hub_reachable():  # offline, datasets would retry for ~25 s before saying so
        raise Sst2Unavailable(
            f"SST-2 is not at {dest} and the Hugging Face hub is not reachable from here "
            f"(offline, or HF_HUB_OFFLINE is set) to download {name}/{config}. {GET_DATA_HINT}"
        )
    download = dest.parent / ".hub-download"
    print(
        f"SST-2: downloading GLUE {config} ({name} on the Hugging Face hub, ~3 MB) once into "
        f"{dest} (offline: set EFFKIT_SST2_DIR to a folder of GLUE's SST-2 TSVs)",
        flush=True,
    )
    try:
        hub = load_dataset(name, config, cache_dir=str(download))
        train = list(zip(hub["train"]["sentence"], hub["train"]["label"], strict=True))
        test = list(zip(hub["validation"]["sentence"], hub["validation"]["label"], strict=True))
    except Exception as err:  # offline, hub down, proxy: all end the same way for the user
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise Sst2Unavailable(
            f"could not download {name}/{config} from the Hugging Face hub into {dest} "
            f"({type(err).__name__}: {first}). {GET_DATA_HINT}"
        ) from None
    out = _write_leak_free(train, test, dest, seed)
    shutil.rmtree(download, ignore_errors=True)  # the TSVs are the copy the course reads
    print(f"SST-2: {len(train):,} GLUE training phrases and {len(test):,} held-out rows in {out}")
    return out


def _write_leak_free(glue_train, glue_dev, dest: Path, seed: int) -> Path:
    train, dev = split_by_sentence(glue_train, 0.1, seed)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sst2-", dir=dest.parent))
    _write_tsv(tmp / "train.tsv", train)
    _write_tsv(tmp / "dev.tsv", dev)
    _write_tsv(tmp / "test.tsv", glue_dev)
    return _publish(tmp, dest)


def is_glue_layout(data_dir: str | Path) -> bool:
    """True for GLUE's own SST-2 folder: train.tsv, dev.tsv (872 rows) and an unlabeled test.tsv."""
    test = Path(data_dir).expanduser() / "test.tsv"
    if not test.is_file() or not (Path(data_dir).expanduser() / "train.tsv").is_file():
        return False
    with test.open(encoding="utf-8") as f:
        return f.readline().strip().lower() == "index\tsentence"


def split_glue_dir(glue_dir: str | Path, dest: str | Path | None = None, seed: int = 0) -> Path:
    """This course's three-split layout built from GLUE's own SST-2 folder, leak-free.

    GLUE's train.tsv is split by source sentence into train.tsv/dev.tsv (no dev phrase inside a
    train phrase), GLUE's labeled dev.tsv becomes test.tsv; the unlabeled GLUE test is unused.
    Written once into ``dest`` (default: the cache, keyed by the folder's path).
    """
    glue_dir = Path(glue_dir).expanduser().resolve()
    if dest is None:
        key = hashlib.sha256(str(glue_dir).encode()).hexdigest()[:12]
        dest = cache_root() / f"sst2-split-{key}-seed{seed}"
    dest = Path(dest)
    if all((dest / f"{s}.tsv").is_file() for s in SPLITS):
        return dest
    train = read_sst2_tsv(glue_dir / "train.tsv")
    dev = read_sst2_tsv(glue_dir / "dev.tsv")
    return _write_leak_free(
        list(zip(train.texts, train.labels, strict=True)),
        list(zip(dev.texts, dev.labels, strict=True)),
        dest,
        seed,
    )


# --- synthetic SST-2 ------------------------------------------------------------------------------
_POSITIVE = (
    "good great charming moving funny brilliant touching delightful superb witty engaging fresh "
    "beautiful gripping wonderful smart clever heartfelt warm lovely inventive stunning solid "
    "enjoyable compelling remarkable tender honest hilarious masterful"
).split()
_NEGATIVE = (
    "bad dull boring tedious awful flat lifeless clumsy stupid lame mediocre messy pointless "
    "tiresome bland predictable sloppy forgettable dreary shallow annoying painful hollow weak "
    "unfunny overlong incoherent dismal stale"
).split()
_FILLER = (
    "the a an of and to in is it that this film movie story with as for its but on by director "
    "cast characters plot script performance scenes audience comedy drama thriller feels "
    "little more than one most all about at from there be has his her their who which you "
    "-- , . 's n't what so even its way time makes"
).split()
_SYLLABLES = "ka ro mi ten sal vo dre pha lun gor bi tes mor ane qui lo fen dar ip sul".split()


def _synthetic_vocab(rng: random.Random) -> list[str]:
    # Invented words widen the vocabulary the way names and rare words do in SST-2.
    invented = {
        "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(400)
    }
    return _FILLER * 4 + sorted(invented)  # common words appear more often, like real text


def _synthetic_row(rng: random.Random, filler: list[str]) -> tuple[str, int]:
    # Length: log-normal with SST-2's shape (median 7 words, 90th percentile ~21, capped at 60).
    n_words = min(60, max(1, round(math.exp(rng.gauss(math.log(7), 0.86)))))
    label = rng.randint(0, 1)
    n_sentiment = max(1, min(n_words, 1 + n_words // 6))
    polarities = [label if rng.random() < 0.8 else 1 - label for _ in range(n_sentiment)]
    words = [rng.choice(filler) for _ in range(n_words - n_sentiment)]
    for polarity in polarities:
        word = rng.choice(_POSITIVE if polarity else _NEGATIVE)
        words.insert(rng.randint(0, len(words)), word)
    # The label is the majority polarity (ties keep the drawn label) with 2% label noise: learnable
    # from the words alone, not perfectly.
    balance = sum(1 if p else -1 for p in polarities)
    label = label if balance == 0 else int(balance > 0)
    if rng.random() < 0.02:
        label = 1 - label
    return " ".join(words), label


def make_synthetic_sst2(
    data_dir: str | Path, n_train: int = 2000, n_eval: int = 500, seed: int = 0
) -> Path:
    """Write train.tsv (``n_train`` rows), dev.tsv and test.tsv (``n_eval`` each) in GLUE format.

    Sentiment comes from a few positive/negative words among fillers, so a small model learns it
    in a few hundred steps; lengths follow SST-2's long-tailed distribution.
    """
    if n_train < 1 or n_eval < 1:
        raise ValueError(f"n_train and n_eval must be >= 1, got {n_train}, {n_eval}")
    data_dir = Path(data_dir).expanduser()
    rng = random.Random(seed)
    filler = _synthetic_vocab(rng)
    data_dir.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        _write_tsv(data_dir / f"{split}.tsv", [_synthetic_row(rng, filler) for _ in range(n)])
    return data_dir


def synthetic_sst2_cached(n_train: int, n_eval: int, seed: int = 0) -> Path:
    """The synthetic set in the cache dir, generated once (atomically) and reused afterwards."""
    dest = cache_root() / f"synthetic-sst2-{n_train}-{n_eval}-seed{seed}"
    if all((dest / f"{s}.tsv").is_file() for s in SPLITS):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".synthetic-", dir=dest.parent))
    make_synthetic_sst2(tmp, n_train, n_eval, seed)
    return _publish(tmp, dest)
