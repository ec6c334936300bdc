"""``repr`` of a view speaks in transitions, like its accessors (issue: 412 rows printed)."""

from __future__ import annotations

import re

import numpy as np

from episodata import Dataset


def _dataset(lengths: list[int]) -> Dataset:
    rng = np.random.default_rng(0)
    return Dataset.from_episodes(
        [
            {
                "initial_observation": rng.normal(size=11).astype(np.float32),
                "observations": rng.normal(size=(n, 11)).astype(np.float32),
                "actions": rng.normal(size=(n, 2)).astype(np.float32),
                "rewards": rng.normal(size=n).astype(np.float32),
                "terminated": True,
            }
            for n in lengths
        ]
    )


def _shapes(text: str) -> dict[str, tuple[list[int], bool]]:
    found = re.findall(r"(\w+/\w+): float32\[([\d, ]*)\]( \+1 row)?", text)
    return {key: ([int(n) for n in dims.split(", ") if n], bool(more)) for key, dims, more in found}


def test_segment_repr_counts_transitions_and_marks_the_shared_row():
    segment = _dataset([411]).episode(0).read()
    text = repr(segment)
    assert text.startswith("Segment(411 transitions")
    shapes = _shapes(text)
    assert shapes["observation/observation"] == (list(segment.obs.shape), True)
    assert shapes["action/action"] == (list(segment.action.shape), False)
    assert shapes["reward/reward"] == (list(segment.reward.shape), False)
    assert "412" not in text


def test_batch_repr_matches_the_accessor_shapes():
    dataset = _dataset([30, 40, 50])
    batch = next(iter(dataset.segment_stream(batch_size=4, sequence_length=8, seed=1)))
    text = repr(batch)
    assert text.startswith("Batch(4 x 8 transitions")
    shapes = _shapes(text)
    assert shapes["observation/observation"] == ([4, 8, 11], True)
    assert list(batch.obs.shape) == [4, 8, 11]
    assert shapes["action/action"] == (list(batch.action.shape), False)
    assert "[4, 9, 11]" not in text
    assert "padded" not in text  # every window is full


def test_padded_batch_says_how_many_transitions_are_padding():
    dataset = _dataset([3, 4])
    batch = next(iter(dataset.segment_stream(batch_size=8, sequence_length=6, seed=2)))
    padded = int((~batch.mask).sum())
    assert padded > 0
    assert f"padded: {padded}" in repr(batch)


def test_transitions_have_no_time_axis_in_their_repr():
    transitions = _dataset([10]).sample_transitions(5, seed=0)
    text = repr(transitions)
    assert text.startswith("Transition(5 transitions")
    assert _shapes(text)["observation/observation"] == ([5, 11], False)
