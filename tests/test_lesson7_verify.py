"""Lesson 7's grader-side sampler checks: the reference passes, each wrong sampler fails with its lesson."""

import numpy as np

from effkit.length_buckets import bucket_batches, split_by_budget
from grader.assignments.lesson7.verify import (
    budget_problem,
    coverage_problem,
    padding_problem,
    parse_batches,
    randomness_problem,
    secret_lengths,
)


def fully_sorted(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
    order = np.argsort(lengths, kind="stable")
    if max_tokens:
        return [b.tolist() for b in split_by_budget(order, np.asarray(lengths), max_tokens, 8)]
    order = order.tolist()
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def drops_last(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
    """Bucketing with the DataLoader habit drop_last=True: partial batches are dropped."""
    batches = bucket_batches(
        lengths, batch_size=batch_size, max_tokens=max_tokens, seed=seed, epoch=epoch
    )
    if batch_size:
        return [b for b in batches if len(b) == batch_size]
    return batches[:-1]


def ignores_budget(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
    return bucket_batches(lengths, batch_size=max_tokens // 16, seed=seed, epoch=epoch)


def findings(sampler, secret=12345, batch_size=32, max_tokens=512):
    out = []
    for lengths in secret_lengths(secret):
        n = len(lengths)
        epochs = {}
        for seed, epoch in [(0, 0), (0, 1), (1, 0)]:
            batches = parse_batches(
                sampler(lengths, batch_size=batch_size, seed=seed, epoch=epoch), n
            )
            epochs[(seed, epoch)] = batches
            out += [coverage_problem(batches, n), padding_problem(lengths, batches, batch_size)]
        budgeted = parse_batches(sampler(lengths, max_tokens=max_tokens, seed=0, epoch=0), n)
        out += [
            coverage_problem(budgeted, n),
            budget_problem(lengths, budgeted, max_tokens),
            randomness_problem(epochs),
        ]
    return [f for f in out if f]


def test_reference_sampler_passes_on_fresh_secrets():
    for secret in (1, 2, 3):
        assert findings(bucket_batches, secret) == []


def test_fully_sorted_fails_on_randomness():
    problems = findings(
        lambda lengths, batch_size=None, max_tokens=None, **k: fully_sorted(
            lengths, batch_size, max_tokens, **k
        )
    )
    # it pads optimally and covers every index: randomness is the only thing it gets wrong
    assert problems and all("full sort is not a sampler" in p for p in problems)


def test_sorting_once_and_shuffling_only_the_batch_order_fails_on_randomness():
    def sort_once_shuffle_order(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
        batches = fully_sorted(lengths, batch_size, max_tokens)
        order = np.random.default_rng([seed, epoch]).permutation(len(batches))
        return [batches[i] for i in order]

    problems = findings(sort_once_shuffle_order)
    assert problems and all("hold exactly the same rows" in p for p in problems)


def test_reference_repeats_few_batches_and_replays_a_seed():
    from grader.assignments.lesson7.verify import (
        MAX_REPEATED_BATCHES,
        determinism_problem,
        repeated_share,
    )

    for lengths in secret_lengths(11):  # secret 11: 21% repeated at batch 64, its worst of 1-20
        a, b = (bucket_batches(lengths, batch_size=64, seed=5, epoch=e) for e in (0, 1))
        assert repeated_share(a, b) <= MAX_REPEATED_BATCHES
        assert (
            determinism_problem(a, bucket_batches(lengths, batch_size=64, seed=5), (5, 0)) is None
        )
    assert "different batches" in determinism_problem(a, b, (5, 0))


def test_dropping_last_batch_fails_on_coverage():
    problems = findings(
        lambda lengths, batch_size=None, max_tokens=None, **k: drops_last(
            lengths, batch_size, max_tokens, **k
        )
    )
    assert problems and all("partial batch" in p for p in problems)


def test_ignoring_token_budget_fails_on_budget():
    problems = findings(
        lambda lengths, batch_size=None, max_tokens=None, **k: (
            bucket_batches(lengths, batch_size=batch_size, **k)
            if batch_size
            else ignores_budget(lengths, max_tokens=max_tokens, **k)
        )
    )
    assert problems and all("exceed the token budget" in p for p in problems)


def test_random_unbucketed_batches_fail_on_padding():
    def random_batches(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
        order = np.random.default_rng([seed, epoch]).permutation(len(lengths)).tolist()
        return [order[i : i + (batch_size or 4)] for i in range(0, len(order), batch_size or 4)]

    assert any("padding share" in p for p in findings(random_batches))


def test_batches_of_one_row_have_no_padding_and_are_refused_as_underfilled():
    from grader.assignments.lesson7.verify import order_problem, size_problem

    lengths = secret_lengths(7)[0]
    singles = [[i] for i in np.random.default_rng(0).permutation(len(lengths)).tolist()]
    assert padding_problem(lengths, singles, 32) is None  # padding alone would pass them
    assert "batches where about" in size_problem(lengths, singles, 32, None)
    assert "batches where about" in size_problem(lengths, singles, None, 1024)
    good = bucket_batches(lengths, batch_size=32, seed=1)
    assert size_problem(lengths, good, 32, None) is None and order_problem(lengths, good) is None
    by_length = sorted(good, key=lambda b: lengths[b].mean())
    assert "batch order follows length" in order_problem(lengths, by_length)
