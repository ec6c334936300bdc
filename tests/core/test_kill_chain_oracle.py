"""The kill chain's oracle: what it expects, and that it names every kind of loss.

The chain itself runs in every persistent backend's kit tests; here its checker meets
datasets damaged on purpose (in memory, no processes), so a chain that passes is known
to be able to fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.testing import example_schema
from episodata_core.testing._crash_checks import Reported, check_dataset
from episodata_core.testing._crash_writer import (
    LENGTHS,
    bulk_episode,
    chain_episode,
    read_variants,
    start_episode,
    write_steps,
)
from episodata_core.testing.crash import KillChainFigures

if TYPE_CHECKING:
    from pathlib import Path


def _stored(dataset: Dataset, episode: int) -> dict[str, np.ndarray]:
    table = dataset.backend.episode_table()
    keys = [
        k
        for k in dataset.schema.qualified_keys
        if k not in table.present or table.present[k][episode]
    ]
    rows = dataset.backend.read_rows(episode, 0, int(table.length[episode]) + 1, keys)
    return {k: np.asarray(v) for k, v in rows.items()}


def test_content_follows_from_the_id_alone() -> None:
    schema = example_schema()
    dtypes = {spec.qualified_key: spec.np_dtype for spec in schema}
    lengths, absent, flags = set(), 0, set()
    for episode in range(60):
        first, again = chain_episode(schema, episode), chain_episode(schema, episode)
        assert sorted(first.rows) == sorted(again.rows)
        for key, values in first.rows.items():
            assert values.dtype == dtypes[key], key
            assert values.shape[0] == first.num_rows, key
            assert values.tobytes() == again.rows[key].tobytes()
        lengths.add(first.num_rows)
        absent += "observation/depth" not in first.rows
        flags.add((first.terminated, first.truncated))
    assert lengths <= set(LENGTHS)
    assert len(lengths) >= 5
    assert 0 < absent < 60
    assert len(flags) == 4
    # another round writes other rows under the same id
    for episode in range(10):
        ours, theirs = chain_episode(schema, episode, 3), chain_episode(schema, episode, 4)
        state = "observation/state"
        assert ours.rows[state][:1].tobytes() != theirs.rows[state][:1].tobytes()
    assert (
        chain_episode(schema, 0).rows["observation/state"].tobytes()
        != (
            chain_episode(schema, 1).rows["observation/state"][: chain_episode(schema, 0).num_rows]
        ).tobytes()
    )


@pytest.mark.parametrize("episode", [0, 3, 7, 12])
def test_bulk_and_step_writes_store_the_expected_rows(episode: int) -> None:
    schema = example_schema()
    content = chain_episode(schema, episode)
    bulk = Dataset.create(schema)
    bulk.add_episode(bulk_episode(schema, content))
    steps = Dataset.create(schema)
    writer = start_episode(steps, content)
    middle = max(1, content.num_rows // 2)
    assert write_steps(writer, schema, content, 1, middle) == (middle == content.num_rows)
    if middle < content.num_rows:
        assert write_steps(writer, schema, content, middle, content.num_rows)
    for dataset in (bulk, steps):
        table = dataset.backend.episode_table()
        assert not table.ongoing[0]
        assert (bool(table.terminated[0]), bool(table.truncated[0])) == (
            content.terminated,
            content.truncated,
        )
        stored = _stored(dataset, 0)
        assert sorted(stored) == sorted(content.rows)
        for key, values in content.rows.items():
            assert stored[key].dtype == values.dtype, key
            assert stored[key].tobytes() == values.tobytes(), key


def _dataset_of(episodes: list[int], *, ongoing: dict[int, int] | None = None) -> Dataset:
    """Episodes ``0..`` with the content the chain expects, or ``episodes[i]``'s content."""
    schema = example_schema()
    dataset = Dataset.create(schema)
    for source in episodes:
        dataset.add_episode(bulk_episode(schema, chain_episode(schema, source)))
    for episode, rows in (ongoing or {}).items():
        assert episode == dataset.num_episodes
        content = chain_episode(schema, episode)
        writer = start_episode(dataset, content)
        write_steps(writer, schema, content, 1, rows)
    return dataset


def _problems(dataset: Dataset, reported: Reported, *, all_or_none: bool = False) -> list[str]:
    figures = KillChainFigures(backend="memory", seed=0)
    problems = check_dataset(dataset, example_schema(), reported, figures, all_or_none=all_or_none)
    assert figures.episodes_checked == dataset.num_episodes
    return problems


def _mid_length_episode() -> int:
    schema = example_schema()
    return next(e for e in range(100) if chain_episode(schema, e).num_rows >= 6)


def test_an_intact_dataset_passes() -> None:
    ongoing = _mid_length_episode()
    dataset = _dataset_of(list(range(ongoing)), ongoing={ongoing: 4})
    reported = Reported(final=set(range(ongoing)), flushed={ongoing: 3})
    assert _problems(dataset, reported) == []


def test_a_reported_episode_that_is_gone_is_lost() -> None:
    dataset = _dataset_of([0, 1, 2])
    figures = KillChainFigures(backend="memory", seed=0)
    reported = Reported(final={0, 1, 2, 3})
    problems = check_dataset(dataset, example_schema(), reported, figures, all_or_none=False)
    assert problems == ["episode 3 (reported finalized) is gone: 3 episodes"]
    assert figures.lost == 1


def test_changed_rows_are_found() -> None:
    # episode 1 holds episode 2's content: same schema, other rows (and maybe length)
    dataset = _dataset_of([0, 2])
    problems = _problems(dataset, Reported(final={0, 1}))
    assert len(problems) == 1
    assert problems[0].startswith("episode 1: ")


def test_an_ongoing_episode_short_of_its_flush_is_lost() -> None:
    ongoing = _mid_length_episode()
    dataset = _dataset_of(list(range(ongoing)), ongoing={ongoing: 3})
    problems = _problems(dataset, Reported(final=set(range(ongoing)), flushed={ongoing: 5}))
    assert problems == [f"episode {ongoing}: holds 3 rows, but 5 were reported flushed"]


def test_a_whole_write_seen_ongoing_is_half_visible() -> None:
    ongoing = _mid_length_episode()
    dataset = _dataset_of(list(range(ongoing)), ongoing={ongoing: 3})
    reported = Reported(final=set(range(ongoing)), whole={ongoing})
    assert _problems(dataset, reported) == [
        f"episode {ongoing}: written whole, but it is ongoing (half-visible)"
    ]


def test_part_of_an_all_or_none_batch_is_found() -> None:
    dataset = _dataset_of([0, 1, 2])
    reported = Reported(final={0}, whole={1, 2, 3}, batches=[(1, 3)])
    assert _problems(dataset, reported) == []  # the npz kind: a prefix may survive
    assert _problems(dataset, reported, all_or_none=True) == [
        "2 of the 3 episodes of the add_episodes call from episode 1 survived; expected all or none"
    ]


def test_report_lines_are_read_once_and_whole(tmp_path: Path) -> None:
    log = tmp_path / "log"
    lines = b"open 0\nadd 0 0\nfinal 0\nstart 1 0\nflush\nflushed 1:3\nbatch 2 3 0\nadd 5 0\nfin"
    log.write_bytes(lines)
    reported = Reported()
    reported.read(log)
    assert reported.final == {0}
    assert reported.flushed == {1: 3}
    assert reported.whole == {0, 2, 3, 4, 5}
    assert reported.batches == [(2, 3)]
    # the torn "fin" waits for the rest of its line; a killed whole write frees its id
    with log.open("ab") as out:
        out.write(b"al 2 3 4\nopen 5\nstart 5 1\nstep 5 3\nflush\nflushed 1:4 5:3\n")
    reported.read(log)
    assert reported.final == {0, 2, 3, 4}
    assert reported.whole == {0, 2, 3, 4}
    assert reported.flushed == {1: 4, 5: 3}
    assert reported.batches == []  # only the round just ended can have torn a batch
    assert reported.flushes == 2
    assert reported.variant == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 1}
    assert read_variants(log) == reported.variant
