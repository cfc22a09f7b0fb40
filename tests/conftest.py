"""Test-wide settings (loaded by pytest before any test module imports torch)."""

import os

import pytest
from accounts_util import open_interpreter_path, restore

# OpenMP threads that spin at barriers collapse when other jobs share the 2 cores (a training
# step ran ~3x slower); PASSIVE makes timing tests, notebook kernels (they inherit this
# environment) and the grader's workers behave on a busy machine. An explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Test files (beside each lesson's own, its manifest's ``timed_tests``) whose gradings or figures time something (an A/B ratio, a latency, a sleep-based
# device): tests/lanes.py runs them one at a time with the last core to themselves, and the rest
# of the suite beside them on the other core. The instructor cycle marks its timed exercises itself.
# test_doctor.py is here because the doctor reads per-call times (a 26 us matmul is "overhead"
# below 40 us): in the other lane, sharing a core with the timed lane's unpinned processes, the
# overhead plant read >50 us and 'none' (CI, 2026-11-27).
TIMED_FILES = {
    "test_bench.py",
    "test_channel.py",
    "test_clock.py",
    "test_demo.py",
    "test_doctor.py",
    "test_gpu_check.py",
    "test_gpu_rehearsal.py",
    "test_grader_submissions.py",
    "test_measure.py",
    "test_serving.py",
}


def _timed_files() -> set[str]:
    """``TIMED_FILES`` and each lesson's own timed tests, as its manifest declares them."""
    from grader import assignments

    return TIMED_FILES | {f for m in assignments.manifests() for f in m.timed_tests}


def pytest_collection_modifyitems(config, items):
    timed = _timed_files()
    for item in items:
        if item.path.name in timed and item.get_closest_marker("untimed") is None:
            item.add_marker(pytest.mark.timed)


def _ab_result(ratios):
    """An `effkit.abtest.ABResult` as `compare` would return for these per-pair speed ratios
    (its median, the median's 95 % interval and that interval's real coverage)."""
    from effkit.abtest import ABResult, median_ci, median_ci_coverage

    lo, hi = median_ci(ratios, 0.95)
    return ABResult(
        ratio=sorted(ratios)[len(ratios) // 2],
        ci_low=lo,
        ci_high=hi,
        confidence=0.95,
        pairs=len(ratios),
        a_speeds=[1.0] * len(ratios),
        b_speeds=list(ratios),
        ratios=list(ratios),
        seconds=1.0,
        coverage=median_ci_coverage(len(ratios), 0.95),
    )


@pytest.fixture
def ab_result():
    """``ab_result(ratios)``: what `effkit.abtest.compare` returns for those pairs (the verdict tests)."""
    return _ab_result


@pytest.fixture
def tiny_bert_config():
    """``tiny_bert_config(layers)``: a BERT classifier's config small enough to build in a test."""
    transformers = pytest.importorskip("transformers")

    def config(layers: int = 2):
        return transformers.BertConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=layers,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
            num_labels=2,
        )

    return config


@pytest.fixture(scope="session", autouse=True)
def _interpreter_reachable_by_other_accounts():
    """Tests run the interpreter as other accounts (tests/accounts_util.py); ``make test``'s lanes
    open its path once for both sessions; a session restores the modes only if it ends last."""
    opened = open_interpreter_path()
    yield
    restore(opened)
