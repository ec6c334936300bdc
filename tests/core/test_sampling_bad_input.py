"""Bad arguments to segments(), segment_stream() and sample_transitions(): clear errors.

Each case asserts the exception type and a fragment of the message that says what is
wrong or how to fix it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from episodata import Dataset, DatasetSchema, FieldSpec
from episodata_core.errors import (
    DatasetStateError,
    FieldNotFoundError,
    PluginNotFoundError,
    SchemaError,
)

SCHEMA = DatasetSchema(
    [
        FieldSpec("observation", shape=(2,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def episode(length: int, **flags: bool) -> dict[str, Any]:
    return {
        "initial_observation": np.zeros(2, dtype=np.float32),
        "observations": np.ones((length, 2), dtype=np.float32),
        "actions": np.arange(length, dtype=np.int64),
        "rewards": np.zeros(length, dtype=np.float32),
        **flags,
    }


@pytest.fixture
def dataset() -> Dataset:
    # lengths 3 and 5: sequence_length 8 leaves only padded windows
    return Dataset.from_episodes([episode(3, truncated=True), episode(5)], schema=SCHEMA)


def make_segments(dataset: Dataset, **kwargs: Any) -> Any:
    return dataset.segments(**kwargs)


def make_stream(dataset: Dataset, **kwargs: Any) -> Any:
    kwargs.setdefault("prefetch", 0)
    return dataset.segment_stream(**kwargs)


BOTH = pytest.mark.parametrize("make", [make_segments, make_stream], ids=["segments", "stream"])


# -- lengths ------------------------------------------------------------------------------


@BOTH
def test_sequence_and_target_length_together(dataset: Dataset, make: Any) -> None:
    with pytest.raises(SchemaError, match="either sequence_length or context_length"):
        make(dataset, sequence_length=4, target_length=2)
    with pytest.raises(SchemaError, match="not both"):
        make(dataset, sequence_length=4, context_length=2, target_length=2)


@BOTH
def test_no_length(dataset: Dataset, make: Any) -> None:
    with pytest.raises(SchemaError, match="segment length missing: pass sequence_length=L"):
        make(dataset)
    with pytest.raises(SchemaError, match="segment length missing"):
        make(dataset, context_length=3)  # target_length forgotten


@BOTH
@pytest.mark.parametrize("value", [0, -1, 2.5, "4", True, None, np.float64(3.0)])
@pytest.mark.parametrize("name", ["sequence_length", "context_length", "target_length"])
def test_lengths_must_be_positive_integers(
    dataset: Dataset, make: Any, name: str, value: Any
) -> None:
    kwargs: dict[str, Any] = (
        {"sequence_length": value}
        if name == "sequence_length"
        else {"context_length": 2, "target_length": 2, name: value}
    )
    if value is None:
        expected = "segment length missing"
    else:
        expected = f"{name} must be a positive integer, got {value!r}"
    with pytest.raises(SchemaError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        make(dataset, **kwargs)


def test_numpy_integer_lengths_are_fine(dataset: Dataset) -> None:
    assert len(dataset.segments(np.int64(2))) == 2 + 4


# -- pad, fields ----------------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("pad", ["both", "end", "", 0, False])
def test_unknown_pad(dataset: Dataset, make: Any, pad: Any) -> None:
    with pytest.raises(SchemaError, match=r"pad must be 'suffix' .* 'prefix' .* or None"):
        make(dataset, sequence_length=4, pad=pad)


@BOTH
def test_unknown_field_names(dataset: Dataset, make: Any) -> None:
    with pytest.raises(FieldNotFoundError, match="'camera' matches no field"):
        make(dataset, sequence_length=2, fields=["observation", "camera"])


def test_unknown_field_names_in_sample_transitions(dataset: Dataset) -> None:
    with pytest.raises(FieldNotFoundError, match="'camera' matches no field") as info:
        dataset.sample_transitions(4, fields="camera")
    assert "observation/observation" in str(info.value)  # lists the fields there are


# -- samplers -----------------------------------------------------------------------------


class Returns:
    """A sampler that returns a fixed value, whatever the index."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def sample(self, index: Any, batch_size: int) -> Any:
        return self.value


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (np.array([0, 6]), r"returned position 6, outside \[0, 6\) \(the index has 6 windows\)"),
        (np.array([-1, 0]), r"returned position -1, outside \[0, 6\)"),
        (np.array([0.0, 1.0]), "must return a 1-D array of integer window positions, got float64"),
        ([0.5], "1-D array of integer window positions, got float64"),
        (
            np.zeros((2, 2), dtype=np.int64),
            r"integer window positions, got int64 of shape \(2, 2\)",
        ),
        (np.int64(3), r"1-D array .* shape \(\)"),
        (np.array(["0"]), "1-D array of integer window positions"),
    ],
    ids=["too-large", "negative", "float", "float-list", "2-D", "scalar", "strings"],
)
def test_sampler_returning_bad_positions(
    dataset: Dataset, returned: Any, message: str, prefetch: int
) -> None:
    stream = dataset.segment_stream(
        sequence_length=2, sampler=Returns(returned), batch_size=2, prefetch=prefetch
    )
    with pytest.raises(SchemaError, match=r"sampler Returns\.sample\(\) .*" + message):
        stream.sample()
    stream.close()


def test_sampler_without_sample_method(dataset: Dataset) -> None:
    with pytest.raises(SchemaError, match=r"a registered name or an object with sample\(index"):
        make_stream(dataset, sequence_length=2, sampler=object())


def test_unknown_sampler_name(dataset: Dataset) -> None:
    with pytest.raises(PluginNotFoundError, match="'uniformm'") as info:
        make_stream(dataset, sequence_length=2, sampler="uniformm")
    assert "uniform" in str(info.value).replace("'uniformm'", "")  # lists the installed ones


def test_sampler_with_an_ordered_pass(dataset: Dataset) -> None:
    with pytest.raises(SchemaError, match="sampler= only applies to shuffle=True"):
        make_stream(dataset, sequence_length=2, shuffle=False, sampler="uniform")


def test_a_custom_sampler_without_state_cannot_be_saved(dataset: Dataset) -> None:
    stream = make_stream(dataset, sequence_length=2, sampler=Returns(np.array([0])))
    with pytest.raises(DatasetStateError, match="Returns has no state_dict"):
        stream.state_dict()


# -- nothing to sample ----------------------------------------------------------------------


def test_filter_that_excludes_everything(dataset: Dataset) -> None:
    with pytest.raises(SchemaError, match="nothing to sample: the filter excludes every episode"):
        make_stream(dataset, sequence_length=2, filter=lambda episode: False)
    with pytest.raises(SchemaError, match="the filter excludes every episode"):
        dataset.sample_transitions(4, filter=lambda episode: episode.terminated)


def test_pad_none_without_a_long_enough_episode(dataset: Dataset) -> None:
    with pytest.raises(SchemaError, match="no episode has 8 transitions") as info:
        make_stream(dataset, sequence_length=8, pad=None)
    message = str(info.value)
    assert "the longest has 5" in message
    assert "pass pad='suffix'" in message


def test_empty_dataset() -> None:
    empty = Dataset.create(SCHEMA)
    with pytest.raises(SchemaError, match="nothing to sample: the dataset has no episodes yet"):
        make_stream(empty, sequence_length=2)
    with pytest.raises(SchemaError, match="the dataset has no episodes yet"):
        empty.sample_transitions(4)
    assert len(empty.segments(2)) == 0
    with pytest.raises(IndexError, match="out of range for 0 segments"):
        empty.segments(2)[0]


def test_only_empty_episodes() -> None:
    dataset = Dataset.from_episodes([episode(0), episode(0)], schema=SCHEMA)
    with pytest.raises(SchemaError, match="no episode has any transitions"):
        make_stream(dataset, sequence_length=1)
    with pytest.raises(SchemaError, match="no episode has any transitions"):
        dataset.sample_transitions(1)


# -- batch size, shards, indices ------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [0, -3, 2.0, "8"])
def test_batch_size_must_be_positive(dataset: Dataset, batch_size: Any) -> None:
    with pytest.raises(SchemaError, match="batch_size must be a positive integer"):
        make_stream(dataset, sequence_length=2, batch_size=batch_size)
    with pytest.raises(SchemaError, match="batch_size must be a positive integer"):
        dataset.sample_transitions(batch_size)


@BOTH
@pytest.mark.parametrize(("rank", "world_size"), [(2, 2), (-1, 2), (0, 0), (5, 1)])
def test_rank_out_of_range(dataset: Dataset, make: Any, rank: int, world_size: int) -> None:
    with pytest.raises(SchemaError, match=rf"rank must be in \[0, world_size={world_size}\)"):
        make(dataset, sequence_length=2, rank=rank, world_size=world_size)


def test_segment_index_out_of_range(dataset: Dataset) -> None:
    segments = dataset.segments(2)
    assert len(segments) == 6
    for bad in (6, -7, 100):
        with pytest.raises(IndexError, match="out of range for 6 segments"):
            segments[bad]
    with pytest.raises(IndexError, match="out of range for 6 segments"):
        segments.__getitems__([0, 6])


def test_collate_of_nothing(dataset: Dataset) -> None:
    with pytest.raises(SchemaError, match="collate: got no segments"):
        dataset.segments(2).collate([])


def test_len_of_an_infinite_stream(dataset: Dataset) -> None:
    with pytest.raises(TypeError, match="infinite and has no len"):
        len(make_stream(dataset, sequence_length=2))
