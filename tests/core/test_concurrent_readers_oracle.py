"""The concurrent-reader check's oracle: honest reads pass, every kind of tear is named.

The check itself runs in the zarr and npz tests, in other processes; here its checker
meets reads of an in-memory dataset, first as the public API returns them (no problem
may be reported: a false alarm would fail every backend), then damaged on purpose (each
damage must be reported with the episode, row and field), so a check that passes is
known to be able to fail.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.testing import concurrent_readers, example_schema
from episodata_core.testing._crash_writer import (
    ChainEpisode,
    bulk_episode,
    chain_episode,
    start_episode,
    write_steps,
)
from episodata_core.testing._reader_checks import (
    TAG_KEY,
    Oracle,
    TableState,
    reader_episode,
    reader_schema,
)
from episodata_core.testing.concurrent_readers import _final_difference

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_core.schema import DatasetSchema

SCHEMA = reader_schema(example_schema())
ONGOING = {5: 20, 11: 3}  # episode -> rows written; the others are written whole


def _dataset() -> Dataset:
    """Episodes 0-11 (lengths 0-149, every flag combination), two of them ongoing."""
    dataset = Dataset.create(SCHEMA, None, backend="memory")
    for episode in range(12):
        content = reader_episode(SCHEMA, episode)
        if episode in ONGOING:
            writer = start_episode(dataset, content)
            write_steps(writer, SCHEMA, content, 1, ONGOING[episode])
        else:
            assert dataset.add_episode(bulk_episode(SCHEMA, content)) == episode
    return dataset


def _table(dataset: Dataset) -> TableState:
    return TableState.of(dataset.backend.episode_table())


def _copy(buffers: Any) -> dict[str, np.ndarray]:
    return {key: np.array(value) for key, value in buffers.items()}


def _windows(oracle: Oracle, batch: Any, table: TableState, **changes: Any) -> list[str]:
    parts = {
        "buffers": batch.buffers,
        "terminated": batch.terminated,
        "truncated": batch.truncated,
        "mask": batch.mask,
        **changes,
    }
    problems, _, _ = oracle.check_windows(
        "windows", parts.pop("buffers"), **parts, older=table, newer=table
    )
    return problems


def test_tags_name_episode_and_row_and_the_rest_is_a_chain_episode() -> None:
    for episode in range(20):
        content, chain = reader_episode(SCHEMA, episode), chain_episode(SCHEMA, episode)
        rows = np.arange(1, content.num_rows + 1)
        assert content.rows[TAG_KEY].dtype == np.int64
        assert content.rows[TAG_KEY].tolist() == [[episode + 1, r] for r in rows]
        assert sorted(content.rows) == sorted(chain.rows)
        for key in chain.rows:
            if key != TAG_KEY:
                assert content.rows[key].tobytes() == chain.rows[key].tobytes(), key
        assert (content.terminated, content.truncated) == (chain.terminated, chain.truncated)
    assert reader_schema(SCHEMA) is SCHEMA  # adding the tag twice changes nothing


def test_honest_reads_report_nothing() -> None:
    dataset = _dataset()
    oracle = Oracle(SCHEMA)
    table = _table(dataset)
    assert table.ongoing.tolist() == [e in ONGOING for e in range(12)]
    assert oracle.check_table(None, table) == []
    assert oracle.check_table(table, table) == []
    checked = 0
    for seed in range(5):
        batch = dataset.sample_transitions(64, seed=seed)
        problems, rows, _ = oracle.check_transitions(
            "t", batch.buffers, batch.terminated, batch.truncated, older=table, newer=table
        )
        assert problems == []
        checked += rows
    for pad in ("suffix", "prefix"):
        stream = dataset.segment_stream(5, batch_size=64, seed=0, pad=pad)
        for _ in range(3):
            assert _windows(oracle, stream.sample(), table) == []
        segments = dataset.segments(5, pad=pad)
        assert _windows(oracle, segments.__getitems__(list(range(len(segments)))), table) == []
    split = dataset.segment_stream(context_length=2, target_length=3, batch_size=32, seed=1)
    assert _windows(oracle, split.sample(), table) == []
    for episode in range(12):
        segment = dataset.episode(episode).read()
        assert (
            oracle.check_episode(
                "e",
                episode,
                segment.buffers,
                segment.terminated,
                segment.truncated,
                older=table,
                newer=table,
            )
            == []
        )
    assert checked == 5 * 64 * 2


def test_a_changed_value_is_named_with_episode_row_and_field() -> None:
    dataset = _dataset()
    oracle = Oracle(SCHEMA)
    table = _table(dataset)
    batch = dataset.sample_transitions(16, seed=3)
    buffers = _copy(batch.buffers)
    episode, row = (int(v) - 1 for v in buffers[TAG_KEY][4, 0])
    buffers["observation/state"][4, 1, 2] += 1.0
    problems, _, _ = oracle.check_transitions(
        "sample_transitions", buffers, batch.terminated, batch.truncated, older=table, newer=table
    )
    assert len(problems) == 1
    expected = reader_episode(SCHEMA, episode).rows["observation/state"][row + 1]
    assert problems[0].startswith(
        f"sample_transitions transition 4: episode {episode} row {row + 1} field "
        f"'observation/state': expected {np.array2string(expected)}"
    )
    assert ", got [" in problems[0]


def test_rows_of_another_episode_or_of_zeros_are_named() -> None:
    dataset = _dataset()
    oracle = Oracle(SCHEMA)
    table = _table(dataset)
    batch = dataset.segments(5).__getitems__(list(range(40)))
    # a window whose middle row holds the same row of another episode: a torn read
    buffers = _copy(batch.buffers)
    episode = int(buffers[TAG_KEY][0, 0, 0]) - 1
    other = next(b for b in range(40) if int(buffers[TAG_KEY][b, 0, 0]) - 1 != episode)
    for key in buffers:
        buffers[key][0, 2] = buffers[key][other, 2]
    problems = _windows(oracle, batch, table, buffers=buffers)
    assert problems
    assert all(p.startswith(f"windows window 0: episode {episode} row 2 field ") for p in problems)
    assert any(f"field {TAG_KEY!r}" in p for p in problems)
    # a window read as zeros: it claims no episode at all
    buffers = _copy(batch.buffers)
    for key in buffers:
        buffers[key][1] = 0
    assert _windows(oracle, batch, table, buffers=buffers) == [
        "windows window 1: a row of no episode (tag [0 0]): zeros where data should be"
    ]


def test_padding_must_be_zeros() -> None:
    dataset = _dataset()
    oracle = Oracle(SCHEMA)
    table = _table(dataset)
    segments = dataset.segments(5, pad="prefix")
    batch = segments.__getitems__(list(range(len(segments))))
    mask = np.asarray(batch.mask)
    padded = int(np.flatnonzero(~mask.all(axis=1))[0])
    buffers = _copy(batch.buffers)
    buffers["observation/camera"][padded, 0] = 7  # prefix padding comes first
    problems = _windows(oracle, batch, table, buffers=buffers)
    assert len(problems) == 1
    assert "padding row 0 field 'observation/camera': expected zeros, got [[[7 7 7" in problems[0]


def test_flags_are_checked_against_the_snapshot() -> None:
    dataset = _dataset()
    oracle = Oracle(SCHEMA)
    table = _table(dataset)
    # episode 3 (4 rows, terminated) as one window of its 3 transitions
    batch = dataset.episode(3).read()
    assert batch.terminated.tolist() == [False, False, True]
    args = ("e", 3, batch.buffers)
    assert (
        oracle.check_episode(*args, batch.terminated, batch.truncated, older=table, newer=table)
        == []
    )
    cleared = np.zeros(3, dtype=bool)
    assert oracle.check_episode(*args, cleared, batch.truncated, older=table, newer=table) == [
        (
            "e: episode 3 (finalized) transition 2: (terminated, truncated) expected (True, False), "
            "got (False, False)"
        )
    ]
    early = np.array([True, False, True])
    assert oracle.check_episode(*args, early, batch.truncated, older=table, newer=table)[
        0
    ].startswith("e: episode 3: a flag before its last real transition")
    # an ongoing episode carries no flag, even on the last row written
    ongoing = dataset.episode(11).read()
    flagged = np.array([False, True])
    assert oracle.check_episode(
        "e", 11, ongoing.buffers, ongoing.terminated, flagged, older=table, newer=table
    ) == [
        (
            "e: episode 11 (ongoing) transition 1: (terminated, truncated) expected (False, False), "
            "got (False, True)"
        )
    ]


def test_an_episode_finalized_during_a_read_may_show_either_state() -> None:
    dataset = _dataset()
    oracle = Oracle(SCHEMA)
    older = _table(dataset)
    content = reader_episode(SCHEMA, 11)  # 9 rows, terminated
    writer = dataset.resume_episode(11)
    write_steps(writer, SCHEMA, content, 3, content.num_rows)
    newer = _table(dataset)
    window = dataset.episode(11).segment(3, 8)
    buffers = {key: np.asarray(v)[None] for key, v in window.buffers.items()}
    mask = np.ones((1, 5), dtype=bool)
    unflagged = np.zeros((1, 5), dtype=bool)
    flagged = unflagged.copy()
    flagged[0, -1] = True

    def check(terminated: Any, truncated: Any, older: TableState) -> list[str]:
        problems, _, _ = oracle.check_windows(
            "w", buffers, terminated, truncated, mask, older=older, newer=newer
        )
        return problems

    assert check(flagged, unflagged, older) == []  # read after the finalize
    assert check(unflagged, unflagged, older) == []  # read before it
    assert check(unflagged, flagged, older) == [
        (
            "w window 0: episode 11 (finalized) transition 7: (terminated, truncated) expected "
            "(True, False), got (False, True)"
        )
    ]
    # finalized before the read began: the flag must be there
    assert check(unflagged, unflagged, newer)[0].endswith(
        "expected (True, False), got (False, False)"
    )


def test_a_read_between_two_tables_may_hold_the_rows_of_either() -> None:
    dataset = _dataset()
    oracle = Oracle(SCHEMA)
    older = _table(dataset)  # episode 11: 3 of its 9 rows
    content = reader_episode(SCHEMA, 11)
    write_steps(dataset.resume_episode(11), SCHEMA, content, 3, 7)
    newer = _table(dataset)  # 7 rows, still ongoing
    assert older.difference(older) is None
    assert older.difference(newer) == "episode 11 (length, ongoing) (2, True) -> (6, True)"
    assert older.difference(_cut(older, 11)) == "12 -> 11 episodes"
    for rows in (3, 5, 7):
        read = {key: v[:rows] for key, v in content.rows.items()}
        flags = np.zeros(rows - 1, dtype=bool)
        args = ("e", 11, read, flags, flags)
        assert oracle.check_episode(*args, older=older, newer=newer) == []
        if rows != 3:
            assert oracle.check_episode(*args, older=older, newer=older) == [
                f"e: episode 11 read [{rows}] rows, the table says 3"
            ]
    read = {key: v[:8] for key, v in content.rows.items()}
    flags = np.zeros(7, dtype=bool)
    assert oracle.check_episode("e", 11, read, flags, flags, older=older, newer=newer) == [
        "e: episode 11 read [8] rows, the table says 3 to 7"
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: _cut(t, 10), "table: 10 episodes after 12 were visible"),
        (lambda t: _set(t, "ongoing", 3, True), "table: episode 3 was finalized, is ongoing now"),
        (
            lambda t: _set(t, "length", 5, 10),
            "table: ongoing episode 5 shrank from 19 to 10 transitions",
        ),
    ],
)
def test_a_table_that_goes_back_is_named(change: Any, message: str) -> None:
    table = _table(_dataset())
    problems = Oracle(SCHEMA).check_table(table, change(table))
    assert message in problems


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: _set(t, "length", 3, 2),
            "table: finalized episode 3 has 2 transitions, expected 3",
        ),
        (
            lambda t: _set(t, "truncated", 3, True),
            (
                "table: episode 3 flags (terminated, truncated) are (True, True), expected "
                "(True, False)"
            ),
        ),
        (
            lambda t: _set(t, "length", 11, 9),
            "table: ongoing episode 11 has 9 transitions, more than the 8 ever written",
        ),
        (
            lambda t: _present(t, "observation/depth", 5, True),
            "table: episode 5 field 'observation/depth' present=True, expected False",
        ),
    ],
)
def test_a_table_that_disagrees_with_the_oracle_is_named(change: Any, message: str) -> None:
    table = _table(_dataset())
    assert Oracle(SCHEMA).check_table(None, change(table)) == [message]


def test_the_last_look_must_be_what_the_writer_left() -> None:
    expected: dict[str, list[Any]] = {"length": [3, 149, 0], "ongoing": [False, True, False]}
    assert _final_difference("r", {"length": [3, 149], "ongoing": [False, True]}, expected) == (
        "r: its last look saw 2 episodes, the writer left 3"
    )
    got: dict[str, list[Any]] = {"length": [3, 120, 0], "ongoing": [False, True, False]}
    assert _final_difference("r", got, expected) == (
        "r: its last look saw episode 1 with (length, ongoing) = (120, True), the writer "
        "left (149, True)"
    )


def _cut(table: TableState, count: int) -> TableState:
    return TableState(
        table.length[:count],
        table.ongoing[:count],
        table.terminated[:count],
        table.truncated[:count],
        {key: column[:count] for key, column in table.present.items()},
    )


def _set(table: TableState, name: str, episode: int, value: Any) -> TableState:
    column = getattr(table, name).copy()
    column[episode] = value
    return dataclasses.replace(table, **{name: column})


def _present(table: TableState, key: str, episode: int, value: bool) -> TableState:
    present = {k: v.copy() for k, v in table.present.items()}
    present[key][episode] = value
    return dataclasses.replace(table, present=present)


@pytest.mark.slow  # reader processes take seconds to start on a busy machine
def test_reader_processes_report_a_wrong_row_with_episode_row_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the whole check on real files and processes, with a writer that stores one wrong
    # value: the readers rebuild episodes on their own, so they must name it
    def wrong(schema: DatasetSchema, episode: int) -> ChainEpisode:
        content = reader_episode(schema, episode)
        if episode != 1:
            return content
        rows = dict(content.rows)
        rows["observation/state"] = rows["observation/state"].copy()
        rows["observation/state"][7, 0] += 1.0
        return ChainEpisode(rows, content.terminated, content.truncated)

    monkeypatch.setattr(concurrent_readers, "reader_episode", wrong)
    figures = concurrent_readers.run_concurrent_readers(
        "npz_directory", str(tmp_path / "dataset"), seconds=0.3, readers=1, loader=False
    )
    assert figures.readers, figures.report()
    assert figures.problems, figures.report()
    expected = f"episode 1 row 7 field {'observation/state'!r}: expected"
    assert all(expected in p or "more problems" in p for p in figures.problems), figures.report()
