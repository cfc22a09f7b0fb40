"""Lesson 7's grader-side checks on a learner's bucketing batch sampler, from its outputs only.

The learner's function runs in the sandboxed worker; what comes back is JSON (lists of index
lists per (distribution, seed, epoch)). Everything here runs in the grader's process on those
lists and on length distributions drawn here from a secret seed, so a submission cannot tune
itself to the distributions it is graded on. :mod:`grader.assignments.lesson7.checks` scores them.
"""

from __future__ import annotations

import numpy as np

from effkit.length_buckets import padded_width, padding_share, sorted_padding_share, split_by_budget

# How far above a full sort's padding share a sampler may land (sorting within 50-batch
# mega-batches lands within ~0.01-0.03 on SST-2-like lengths; random batches ~0.3 above).
PADDING_SLACK = 0.06


def secret_lengths(secret: int) -> list[np.ndarray]:
    """Length distributions drawn per grading: SST-2-like skew, uniform, and bimodal."""
    rng = np.random.default_rng(secret)
    n = int(rng.integers(1500, 2500))
    skewed = np.clip(rng.lognormal(2.2, 0.6, n).astype(int) + 2, 3, 70)
    uniform = rng.integers(4, 120, int(rng.integers(800, 1500)))
    bimodal = np.concatenate([rng.integers(5, 15, n // 2), rng.integers(60, 100, n // 3)])
    return [skewed, uniform, rng.permutation(bimodal)]


def parse_batches(raw, n: int) -> list[list[int]]:
    """Validate JSON-decoded output: a list of non-empty lists of ints in [0, n)."""
    if not isinstance(raw, list) or not all(isinstance(b, list) and b for b in raw):
        raise ValueError("the sampler must return a list of non-empty lists of indices")
    for b in raw:
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in b):
            raise ValueError(f"indices must be ints in [0, {n})")
    return raw


def coverage_problem(batches: list[list[int]], n: int) -> str | None:
    """None if every index appears exactly once; else a message that teaches."""
    seen = np.bincount(np.fromiter((i for b in batches for i in b), dtype=np.int64), minlength=n)
    missing, doubled = int((seen == 0).sum()), int((seen > 1).sum())
    if missing:
        return (
            f"{missing} of {n} indices never appear in the epoch: did the last, partial batch "
            "get dropped? Every example must be seen once per epoch."
        )
    if doubled:
        return f"{doubled} indices appear more than once in one epoch."
    return None


def budget_problem(lengths: np.ndarray, batches: list[list[int]], max_tokens: int) -> str | None:
    """None if every batch of more than one row fits rows x padded width <= max_tokens."""
    over = [
        b for b in batches if len(b) > 1 and len(b) * padded_width(lengths[b].max()) > max_tokens
    ]
    if over:
        worst = max(len(b) * padded_width(lengths[b].max()) for b in over)
        return (
            f"{len(over)} batches exceed the token budget of {max_tokens} (worst {worst}) counted "
            "as rows x width padded to a multiple of 8: size batches by tokens, not rows."
        )
    return None


def size_problem(
    lengths: np.ndarray, batches: list[list[int]], batch_size: int | None, max_tokens: int | None
) -> str | None:
    """None if batches are as full as asked: at most ``batch_size`` rows and at most 10% more batches
    than needed (batch size), or at most 10% more batches than a full sort's greedy cut (budget).
    Without it, batches of one row would have no padding at all."""
    if batch_size is not None:
        big = max(len(b) for b in batches)
        if big > batch_size:
            return f"a batch has {big} rows, more than batch_size={batch_size}."
        need = -(-len(lengths) // batch_size)
    else:
        need = len(split_by_budget(np.argsort(lengths, kind="stable"), lengths, max_tokens, 8))
    if len(batches) > 1.1 * need + 1:
        return (
            f"{len(batches)} batches where about {need} are enough: fill each batch up to the "
            "batch size (or the token budget); smaller batches mean more, slower steps."
        )
    return None


def optimum_share(lengths: np.ndarray, batch_size: int | None, max_tokens: int | None) -> float:
    """Padding share of a full length sort sliced by batch size, or cut greedily by the budget."""
    if batch_size is not None:
        return sorted_padding_share(lengths, batch_size)
    return padding_share(
        lengths, split_by_budget(np.argsort(lengths, kind="stable"), lengths, max_tokens, 8)
    )


def padding_problem(
    lengths: np.ndarray,
    batches: list[list[int]],
    batch_size: int | None,
    max_tokens: int | None = None,
) -> str | None:
    """None if the padding share is within PADDING_SLACK of a full sort's."""
    share, optimum = padding_share(lengths, batches), optimum_share(lengths, batch_size, max_tokens)
    if share > optimum + PADDING_SLACK:
        return (
            f"padding share {share:.1%} against {optimum:.1%} for a full sort: group examples "
            "of similar length (sort within mega-batches) before slicing batches."
        )
    return None


# At most this share of one epoch's batches may recur, as the same set of rows, in another epoch or
# seed. Sorting once and shuffling only the batch order repeats all of them. The reference repeats at
# most 29% (300 secrets x 3 distributions, batch 64 and budget 2048, its worst modes): the grader's
# 800-2,500 rows fit in one 50-batch mega-batch, so batches that tie-breaking cannot change (the
# longest rows, a length class that fills a batch exactly) recur.
MAX_REPEATED_BATCHES = 0.5


def repeated_share(a: list[list[int]], b: list[list[int]]) -> float:
    """Share of b's batches that are, as sets of rows, also batches of a."""
    seen = {frozenset(x) for x in a}
    return sum(frozenset(x) in seen for x in b) / len(b)


def randomness_problem(epochs: dict[tuple[int, int], list[list[int]]]) -> str | None:
    """None if batch membership (not only the batch order) changes across epochs and seeds."""
    keys = sorted(epochs)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if [sorted(x) for x in epochs[a]] == [sorted(x) for x in epochs[b]]:
                return (
                    f"seed/epoch {a} and {b} give identical batches in identical order: a full "
                    "sort is not a sampler. Shuffle before grouping and shuffle the batch order."
                )
            share = repeated_share(epochs[a], epochs[b])
            if share > MAX_REPEATED_BATCHES:
                return (
                    f"{share:.0%} of the batches of seed/epoch {b} hold exactly the same rows as "
                    f"batches of {a} (at most {MAX_REPEATED_BATCHES:.0%} allowed): shuffling only "
                    "the batch order keeps the same rows together every epoch. Shuffle the rows "
                    "before grouping them (sort within mega-batches), so batch membership changes."
                )
    return None


def determinism_problem(first: list[list[int]], again: list[list[int]], key) -> str | None:
    """None if a second call with the same (seed, epoch) returned the same batches in the same order."""
    if first != again:
        return (
            f"two calls with seed/epoch {key} returned different batches: draw every random "
            "choice from a generator seeded with (seed, epoch), e.g. np.random.default_rng([seed, "
            "epoch]), not from a global RNG, so a run can be resumed and reproduced."
        )
    return None


def order_problem(lengths: np.ndarray, batches: list[list[int]]) -> str | None:
    """None unless the batch order follows length: a rank correlation beyond 0.5 and beyond 4
    standard errors of a random order's (1/sqrt(n - 1)), so a shuffled order fails about once in
    30,000 answers. Short batches first and long ones last is a curriculum nobody asked for."""
    if len(batches) < 8:
        return None
    limit = max(0.5, 4 / np.sqrt(len(batches) - 1))
    means = np.array([lengths[b].mean() for b in batches])
    ranks = np.argsort(np.argsort(means, kind="stable"), kind="stable")
    rho = float(np.corrcoef(np.arange(len(batches)), ranks)[0, 1])
    if abs(rho) > limit:
        return (
            f"the batch order follows length (rank correlation {rho:+.2f} between a batch's position and "
            "its mean length): shuffle the order of the batches after grouping."
        )
    return None
