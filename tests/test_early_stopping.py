"""Early stopping: stops at the right epoch and survives a checkpoint round-trip."""

from __future__ import annotations

import io

import pytest
import torch

from effkit.early_stopping import EarlyStopping


def first_stop(stopper: EarlyStopping, values) -> int | None:
    for epoch, value in enumerate(values):
        if stopper.step(value):
            return epoch
    return None


def test_max_mode_stops_after_patience_bad_epochs():
    accuracies = [0.50, 0.60, 0.65, 0.64, 0.65, 0.63, 0.70]
    stopper = EarlyStopping(patience=3, mode="max")
    # Best 0.65 at epoch 2; epochs 3, 4 (a tie is not an improvement), 5 are bad -> stop at 5.
    assert first_stop(stopper, accuracies) == 5
    assert stopper.best == 0.65 and stopper.best_epoch == 2 and stopper.bad_epochs == 3


def test_min_mode_and_min_delta():
    losses = [1.0, 0.8, 0.79, 0.78, 0.5]
    # Improvements smaller than min_delta=0.05 do not reset the counter.
    stopper = EarlyStopping(patience=2, mode="min", min_delta=0.05)
    assert first_stop(stopper, losses) == 3
    assert stopper.best == 0.8
    # Without min_delta the small improvements count and it never stops.
    assert first_stop(EarlyStopping(patience=2, mode="min"), losses) is None


def test_improved_flag_counter_reset_and_nan():
    stopper = EarlyStopping(patience=2, mode="min")
    assert not stopper.step(1.0) and stopper.improved
    assert not stopper.step(float("nan")) and not stopper.improved and stopper.bad_epochs == 1
    assert not stopper.step(torch.tensor(0.5)) and stopper.improved and stopper.bad_epochs == 0
    assert not stopper.step(0.7)
    assert stopper.step(0.6)


def test_patience_zero_stops_at_first_non_improvement():
    assert first_stop(EarlyStopping(patience=0), [1, 2, 3, 3]) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"patience": -1}, "patience must be an integer >= 0"),
        ({"patience": 2.5}, "patience must be an integer >= 0"),
        ({"patience": 3, "mode": "maximize"}, "mode must be 'max' or 'min'"),
        ({"patience": 3, "min_delta": -0.1}, "min_delta must be a finite number >= 0"),
    ],
)
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EarlyStopping(**kwargs)


def test_state_round_trip_through_torch_save_continues_the_counter():
    values = [0.3, 0.5, 0.4, 0.45, 0.42, 0.41]
    uninterrupted = EarlyStopping(patience=3)
    assert first_stop(uninterrupted, values) == 4

    before = EarlyStopping(patience=3)
    for value in values[:4]:  # best 0.5 at epoch 1, then two bad epochs
        before.step(value)
    buffer = io.BytesIO()
    torch.save({"early_stopping": before.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["early_stopping"]

    resumed = EarlyStopping(patience=3)
    resumed.load_state_dict(state)
    assert (resumed.best, resumed.bad_epochs, resumed.epochs) == (0.5, 2, 4)
    # The 5th value is the 3rd bad epoch in a row: a reset counter would not stop here.
    assert resumed.step(values[4]) is True
    assert resumed.state_dict() == uninterrupted.state_dict()


def test_loading_state_of_the_other_mode_is_refused():
    state = EarlyStopping(patience=1, mode="min").state_dict()
    with pytest.raises(ValueError, match="saved with mode='min'"):
        EarlyStopping(patience=1, mode="max").load_state_dict(state)
