"""The CIFAR-10 workload: data in the real format, pipelines, recipes and the build() API.

Everything runs offline on synthetic data written in the official ``cifar-10-batches-py`` format
and read back through ``torchvision.datasets.CIFAR10``, so the real loading code is what is tested.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("torchvision")

from torchvision.datasets import CIFAR10  # noqa: E402

from effkit.workloads import cifar  # noqa: E402
from effkit.workloads.cifar import data as cdata  # noqa: E402
from effkit.workloads.cifar.models import airbench_net, init_whitening, naive_resnet  # noqa: E402
from effkit.workloads.common import train_to_target  # noqa: E402

MEAN = np.array(cifar.CIFAR_MEAN) * 255
STD = np.array(cifar.CIFAR_STD) * 255


@pytest.fixture(scope="module")
def smoke_root(tmp_path_factory) -> Path:
    """The smoke profile's data, generated through the default cache path under $EFFKIT_DATA."""
    home = tmp_path_factory.mktemp("effkit_data")
    old = os.environ.get("EFFKIT_DATA")
    os.environ["EFFKIT_DATA"] = str(home)
    try:
        root = cifar.prepare_data("smoke")
        yield root
    finally:
        if old is None:
            os.environ.pop("EFFKIT_DATA", None)
        else:
            os.environ["EFFKIT_DATA"] = old


@pytest.fixture
def tiny_root(tmp_path) -> Path:
    return cifar.make_synthetic_cifar(tmp_path / "tiny", n_train=50, n_test=20, seed=3)


@pytest.fixture(scope="module")
def make_dataset(tmp_path_factory):
    """A real torchvision CIFAR10 object whose images and labels a test chooses (as build() does
    when it subsets a profile's data)."""
    root = cifar.make_synthetic_cifar(tmp_path_factory.mktemp("pipelines"), 5, 1, seed=0)

    def make(images: np.ndarray, labels: list[int]) -> CIFAR10:
        dataset = cifar.load_cifar(root, train=True)
        dataset.data, dataset.targets = images, list(labels)
        return dataset

    return make


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """Undo the normalisation: float N x 3 x H x W -> uint8 N x H x W x 3."""
    img = x.float().permute(0, 2, 3, 1).cpu().numpy() * STD + MEAN
    return np.rint(img).clip(0, 255).astype(np.uint8)


def find_crop(out: np.ndarray, padded: np.ndarray) -> tuple[int, int, bool] | None:
    """(dy, dx, flipped) such that ``out`` is that crop of ``padded``, or None."""
    size = out.shape[0]
    for dy in range(padded.shape[0] - size + 1):
        for dx in range(padded.shape[1] - size + 1):
            crop = padded[dy : dy + size, dx : dx + size]
            for flipped in (False, True):
                if np.array_equal(out, crop[:, ::-1] if flipped else crop):
                    return dy, dx, flipped
    return None


# ----------------------------------------------------------------------------------------------
# Data on disk
# ----------------------------------------------------------------------------------------------


def test_synthetic_files_have_the_official_format(tiny_root):
    base = tiny_root / "cifar-10-batches-py"
    expected = {f"data_batch_{i}" for i in range(1, 6)} | {"test_batch", "batches.meta"}
    assert expected <= {p.name for p in base.iterdir()}
    with open(base / "data_batch_1", "rb") as f:  # the CIFAR website's own loading snippet
        batch = pickle.load(f, encoding="bytes")
    assert set(batch) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (10, 3072)
    assert all(isinstance(v, int) for v in batch[b"labels"]) and len(batch[b"labels"]) == 10
    assert isinstance(batch[b"filenames"][0], bytes)
    with open(base / "batches.meta", "rb") as f:
        meta = pickle.load(f, encoding="bytes")
    assert meta[b"label_names"][0] == b"airplane" and meta[b"num_vis"] == 3072


def test_synthetic_data_reads_back_through_torchvision(tiny_root):
    train = cifar.load_cifar(tiny_root, train=True)
    test = cifar.load_cifar(tiny_root, train=False)
    assert type(train) is CIFAR10 and train.transform is None
    assert train.data.shape == (50, 32, 32, 3) and train.data.dtype == np.uint8
    assert test.data.shape == (20, 32, 32, 3)
    assert set(train.targets) <= set(range(10)) and len(train.targets) == 50
    assert train.classes == list(cdata.LABEL_NAMES)
    # Row-major R, G, B planes: torchvision's HWC view must reproduce the generated images.
    images, labels = cdata.synthetic_images(50, seed=3)
    np.testing.assert_array_equal(train.data, images)
    assert train.targets == labels.tolist()
    img, label = train[0]  # torchvision's own __getitem__ (PIL) works too
    assert img.size == (32, 32) and label == labels[0]
    assert pickle.loads(pickle.dumps(train)).data.shape == train.data.shape  # spawn-safe


def test_synthetic_images_are_balanced_and_reproducible():
    a_images, a_labels = cdata.synthetic_images(200, seed=1)
    b_images, b_labels = cdata.synthetic_images(200, seed=1)
    np.testing.assert_array_equal(a_images, b_images)
    assert np.bincount(a_labels, minlength=10).tolist() == [20] * 10
    assert not np.array_equal(a_images, cdata.synthetic_images(200, seed=2)[0])


def test_missing_and_empty_data_dirs_explain_how_to_get_data(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(cifar.CifarDataError, match="does not exist") as err:
        cifar.load_cifar(missing)
    assert str(missing) in str(err.value) and "smoke" in str(err.value)
    with pytest.raises(cifar.CifarDataError, match="no cifar-10-batches-py"):
        cifar.load_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(cifar.CifarDataError, match="empty"):
        cifar.load_cifar(tmp_path)
    with pytest.raises(cifar.CifarDataError, match="pass its parent"):
        cifar.load_cifar(tmp_path / "cifar-10-batches-py")
    with pytest.raises(cifar.CifarDataError, match=str(missing)):
        cifar.prepare_data("gpu", data_dir=missing)


def test_corrupt_or_incomplete_data_is_rejected(tiny_root):
    base = tiny_root / "cifar-10-batches-py"
    batch = base / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:-100])  # truncated: fails its checksum
    with pytest.raises(cifar.CifarDataError, match="md5") as err:
        cifar.load_cifar(tiny_root)
    assert str(base) in str(err.value)
    batch.unlink()
    with pytest.raises(cifar.CifarDataError, match="missing data_batch_3"):
        cifar.load_cifar(tiny_root)


def test_without_manifest_the_official_checksums_apply(tiny_root):
    (tiny_root / "cifar-10-batches-py" / cdata.MANIFEST).unlink()
    with pytest.raises(cifar.CifarDataError, match="official"):
        cifar.load_cifar(tiny_root)


# ----------------------------------------------------------------------------------------------
# Pipelines
# ----------------------------------------------------------------------------------------------


def id_images(n: int) -> tuple[np.ndarray, list[int]]:
    """Constant images whose colour encodes their index (R, G) and label (B)."""
    labels = [(i * 7) % 10 for i in range(n)]
    images = np.zeros((n, 32, 32, 3), np.uint8)
    images[..., 0] = (np.arange(n) % 256)[:, None, None]
    images[..., 1] = (np.arange(n) // 256)[:, None, None]
    images[..., 2] = (np.array(labels) * 20)[:, None, None]
    return images, labels


@pytest.mark.parametrize("pipeline_cls", [cifar.DevicePipeline, cifar.TorchvisionPipeline])
def test_pipeline_epochs_cover_every_sample_once_with_aligned_labels(pipeline_cls, make_dataset):
    n, batch = 300, 64
    pipe = pipeline_cls(make_dataset(*id_images(n)), batch, "cpu", 0)
    assert len(pipe) == -(-n // batch)
    orders = []
    for _ in range(2):
        seen = []
        for x, y in pipe:
            assert (
                x.dtype == torch.float32 and x.shape[1:] == (3, 32, 32) and x.device.type == "cpu"
            )
            assert y.dtype == torch.int64
            centre = to_uint8(x)[:, 16, 16]  # crops shift by <= 4 px: the centre stays inside
            ids = centre[:, 0].astype(int) + 256 * centre[:, 1].astype(int)
            assert (centre[:, 2] == y.numpy() * 20).all(), "labels travelled apart from images"
            seen.extend(ids.tolist())
        assert sorted(seen) == list(range(n))
        orders.append(seen)
    assert orders[0] != orders[1], "each iter() must reshuffle"


@pytest.mark.parametrize("pipeline_cls", [cifar.DevicePipeline, cifar.TorchvisionPipeline])
def test_pipeline_outputs_are_padded_crops_and_mirrors(pipeline_cls, make_dataset):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (1, 32, 32, 3), dtype=np.uint8)
    padded = np.pad(image[0], ((4, 4), (4, 4), (0, 0)))  # torchvision pads with black
    pipe = pipeline_cls(make_dataset(np.repeat(image, 64, 0), [1] * 64), 64, "cpu", 0)
    found = [find_crop(out, padded) for x, _ in pipe for out in to_uint8(x)]
    assert None not in found, "an output is not a translation of the zero-padded image"
    assert len({(dy, dx) for dy, dx, _ in found}) > 20  # many different shifts...
    assert {f for *_, f in found} == {False, True}  # ...and both orientations


def test_device_pipeline_augment_matches_a_numpy_reference(make_dataset):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    pipe = cifar.DevicePipeline(make_dataset(images, [0] * 5), 5, "cpu", 0, padding_mode="reflect")
    idx = torch.tensor([4, 0, 2])
    shifts = torch.tensor([[0, 8], [3, 1], [8, 0]])
    flips = torch.tensor([True, False, True])
    out = pipe.augment(idx, shifts, flips).numpy()
    for k in range(3):
        ref = np.pad(images[idx[k]], ((4, 4), (4, 4), (0, 0)), mode="reflect")
        dy, dx = shifts[k].tolist()
        ref = ref[dy : dy + 32, dx : dx + 32]
        np.testing.assert_array_equal(out[k], ref[:, ::-1] if flips[k] else ref)


def test_alternating_flip_mirrors_each_image_every_other_epoch(make_dataset):
    images = np.random.default_rng(2).integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
    dataset = make_dataset(images, list(range(40)))
    pipe = cifar.DevicePipeline(dataset, 40, "cpu", 0, pad=0, flip="alternating")
    states = []
    for _ in range(3):
        ((x, y),) = list(pipe)
        out = to_uint8(x)
        flipped = {}
        for img, label in zip(out, y.tolist(), strict=True):
            assert np.array_equal(img, images[label]) or np.array_equal(img, images[label][:, ::-1])
            flipped[label] = not np.array_equal(img, images[label])
        states.append(flipped)
    assert all(states[0][i] != states[1][i] and states[0][i] == states[2][i] for i in range(40))
    assert 0 < sum(states[0].values()) < 40


def test_device_pipeline_normalises_and_drops_last(make_dataset):
    value = np.full((10, 32, 32, 3), 200, np.uint8)
    pipe = cifar.DevicePipeline(make_dataset(value, [0] * 10), 4, "cpu", 0, pad=0, drop_last=True)
    batches = list(pipe)
    assert len(pipe) == len(batches) == 2
    expected = (200 - MEAN) / STD
    np.testing.assert_allclose(batches[0][0][0, :, 5, 5].numpy(), expected, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


def test_naive_model_is_torchvision_resnet18_and_narrow_variants_shrink():
    import torchvision

    ref = torchvision.models.resnet18(num_classes=10)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(naive_resnet(18, 64)) == count(ref)
    assert count(naive_resnet(10, 16)) < count(naive_resnet(10, 64)) / 10
    assert naive_resnet(10, 16)(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="depth"):
        naive_resnet(34)


def test_whitening_conv_decorrelates_patches():
    torch.manual_seed(0)
    mix = torch.randn(3, 3)
    images = torch.einsum("dc,nchw->ndhw", mix, torch.randn(64, 3, 16, 16))  # correlated channels
    net = airbench_net((8, 16, 16))
    init_whitening(net[0], images, eps=0.0)
    with torch.no_grad():
        out = torch.nn.functional.conv2d(images, net[0].weight[:12])  # the + half of the pairs
    flat = out.permute(0, 2, 3, 1).reshape(-1, 12)
    cov = flat.T @ flat / len(flat)
    torch.testing.assert_close(cov, torch.eye(12), atol=1e-3, rtol=0)


# ----------------------------------------------------------------------------------------------
# Recipes and build()
# ----------------------------------------------------------------------------------------------


def params(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


@pytest.mark.parametrize("recipe", ["naive", "optimized"])
def test_smoke_recipe_builds_trains_and_evaluates(smoke_root, recipe):
    assert smoke_root.is_relative_to(os.environ["EFFKIT_DATA"])
    trainer = cifar.build(recipe, "smoke", device="cpu")
    profile = cifar.PROFILES["smoke"]
    assert trainer.recipe == recipe and trainer.target == profile.target
    assert trainer.total_steps >= trainer.steps_per_epoch >= 1
    assert trainer.flops_per_sample and trainer.flops_per_sample > 1e5
    before = params(trainer)
    work = trainer.train_steps(2)
    assert work.samples == 2 * trainer.describe()["batch_size"]
    assert any(not torch.equal(a, b) for a, b in zip(before, params(trainer), strict=True))
    acc = trainer.evaluate()
    assert 0.0 <= acc <= 1.0
    info = trainer.describe()
    assert info["data"] == "synthetic" and info["n_train"] == profile.n_train
    assert info["pipeline"] == ("TorchvisionPipeline" if recipe == "naive" else "DevicePipeline")


@pytest.mark.slow
def test_optimized_smoke_run_reaches_its_target(smoke_root):
    trainer = cifar.build("optimized", "smoke", device="cpu", seed=0)
    result = train_to_target(trainer, eval_every=trainer.eval_every, progress=False)
    assert result.time_to_target_s is not None, result.history
    assert result.steps < trainer.total_steps or result.accuracy >= trainer.target


def test_build_plugs_a_custom_pipeline_into_the_naive_recipe(smoke_root):
    calls = []

    class LearnerPipeline:
        def __init__(self, dataset, batch_size, device, seed):
            calls.append((type(dataset), dataset.transform, batch_size, device, seed))
            self.x = torch.zeros(batch_size, 3, 32, 32, device=device)
            self.y = torch.arange(batch_size, device=device) % 10

        def __len__(self):
            return 3

        def __iter__(self):
            for _ in range(3):
                calls.append("batch")
                yield self.x, self.y

    trainer = cifar.build("naive", "smoke", device="cpu", seed=5, pipeline=LearnerPipeline)
    default = cifar.build("naive", "smoke", device="cpu", seed=5).describe()
    assert calls[0] == (CIFAR10, None, 128, torch.device("cpu"), 5)
    assert trainer.steps_per_epoch == 3
    assert trainer.train_steps(4).samples == 4 * 128  # cycles into a second epoch
    assert calls.count("batch") == 4
    changed = {k for k, v in trainer.describe().items() if default[k] != v}
    assert changed == {"pipeline", "num_workers", "steps_per_epoch", "total_steps"}


def test_build_rejects_unknown_names(smoke_root):
    with pytest.raises(ValueError, match=r"'fast'.*naive.*optimized"):
        cifar.build("fast", "smoke")
    with pytest.raises(ValueError, match=r"'tpu'.*smoke.*cpu.*gpu"):
        cifar.build("naive", "tpu")
    with pytest.raises(ValueError, match=r"prefetch"):
        cifar.build("naive", "smoke", prefetch=True)
    with pytest.raises(ValueError, match=r"'tpu'"):
        cifar.prepare_data("tpu")

    class WrongSignature:
        def __init__(self, dataset):
            pass

    with pytest.raises(TypeError, match="dataset, batch_size, device, seed"):
        cifar.build("naive", "smoke", device="cpu", pipeline=WrongSignature)


def test_optimized_lr_scales_with_batch_size(smoke_root):
    base = cifar.build("optimized", "smoke", device="cpu")
    double = cifar.build("optimized", "smoke", device="cpu", batch_size=2 * base.cfg.batch_size)
    assert double.cfg.lr == pytest.approx(2 * base.cfg.lr)
    assert double.steps_per_epoch == base.steps_per_epoch // 2


def test_a_cpu_chooses_its_evaluation_batch_by_timing_the_first_evaluation_and_accuracy_is_unchanged():
    """At 1000 images a batch airbench's evaluation left the caches (974 images/s against 3,372 at 100
    on a 2-core EPYC): a CPU now times the probe sizes on the first evaluation's own batches and keeps
    the fastest; every image is evaluated once either way, so accuracy cannot move."""
    from types import SimpleNamespace

    from effkit.workloads.cifar.pipelines import CPU_EVAL_BATCHES, DeviceTestSet

    rng = np.random.default_rng(0)
    n = sum(CPU_EVAL_BATCHES) + 100
    data = SimpleNamespace(
        data=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
        targets=rng.integers(0, 10, n).tolist(),
    )
    net = naive_resnet(depth=10, width=8).eval()
    seen = []

    def predict(x):
        seen.append(len(x))
        return net(x)

    probing, fixed = DeviceTestSet(data, "cpu"), DeviceTestSet(data, "cpu", batch_size=1000)
    assert probing.batch_size is None and fixed.batch_size == 1000
    first = probing.accuracy(predict)
    assert seen[: len(CPU_EVAL_BATCHES)] == list(CPU_EVAL_BATCHES) and sum(seen) == n
    assert probing.batch_size in CPU_EVAL_BATCHES and "the fastest measured" in probing.choice
    assert all(size == probing.batch_size for size in seen[len(CPU_EVAL_BATCHES) : -1])
    assert first == fixed.accuracy(net) == probing.accuracy(net)
