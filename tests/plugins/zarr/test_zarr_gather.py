"""Batched reads: each chunk is read and decoded once per batch, and results are exact."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tensorstore as ts
from _zarr_helpers import make_backend

from episodata_core.protocols import GatherRequest
from episodata_core.testing import example_rows
from episodata_zarr._gather import plan_reads

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_core.schema import DatasetSchema


@pytest.fixture(params=["ranges", "index"])
def strategy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force one of the two read strategies of gather_rows (it picks by cost otherwise)."""
    from episodata_zarr import _reads

    monkeypatch.setattr(_reads, "_RANGE_NS", 0 if request.param == "ranges" else 10**12)
    return str(request.param)


def _file_reads() -> int:
    for metric in ts.experimental_collect_matching_metrics("/tensorstore/kvstore/file/read"):
        if metric["name"] == "/tensorstore/kvstore/file/read":
            return int(metric["values"][0]["value"])
    return 0


def _reference(
    episodes: list[dict[str, Any]], request: GatherRequest, key: str
) -> np.ndarray[Any, Any]:
    first = episodes[0][key]
    out = np.zeros((len(request), request.num_rows, *first.shape[1:]), dtype=first.dtype)
    for b in range(len(request)):
        rows = episodes[int(request.episodes[b])][key]
        start, count, offset = (
            int(request.starts[b]),
            int(request.counts[b]),
            int(request.offsets[b]),
        )
        out[b, offset : offset + count] = rows[start : start + count]
    return out


def _request(
    episodes: Any, starts: Any, counts: Any, num_rows: int, fields: Any, offsets: Any = None
) -> GatherRequest:
    counts = np.asarray(counts, dtype=np.int64)
    return GatherRequest(
        episodes=np.asarray(episodes, dtype=np.int64),
        starts=np.asarray(starts, dtype=np.int64),
        counts=counts,
        offsets=np.zeros_like(counts) if offsets is None else np.asarray(offsets, np.int64),
        num_rows=num_rows,
        fields=tuple(fields),
    )


def test_plan_merges_windows_that_share_a_chunk() -> None:
    starts = np.array([12, 0, 3, 25, 31, 50], dtype=np.int64)
    counts = np.array([4, 5, 2, 3, 2, 10], dtype=np.int64)
    plan = plan_reads(starts, counts, chunk_rows=10)
    # windows 0-4 and 3-5 share chunk 0; 12-16 is alone in chunk 1; 25-28 and 31-33
    # touch chunks 2 and 3 and overlap nothing else; 50-60 is chunk 5
    assert list(zip(plan.lo.tolist(), plan.hi.tolist(), strict=True)) == [
        (0, 5),
        (12, 16),
        (25, 28),
        (31, 33),
        (50, 60),
    ]
    assert plan.read.tolist() == [1, 0, 0, 2, 3, 4]


def test_plan_never_reads_a_chunk_twice_or_for_nothing() -> None:
    rng = np.random.default_rng(0)
    for chunk in (1, 3, 16, 100):
        starts = rng.integers(0, 500, size=200).astype(np.int64)
        counts = rng.integers(1, 40, size=200).astype(np.int64)
        plan = plan_reads(starts, counts, chunk)
        covered = [
            set(range(lo // chunk, (hi - 1) // chunk + 1))
            for lo, hi in zip(plan.lo, plan.hi, strict=True)
        ]
        needed = set().union(
            *(
                range(s // chunk, (s + c - 1) // chunk + 1)
                for s, c in zip(starts, counts, strict=True)
            )
        )
        assert sum(len(c) for c in covered) == len(set().union(*covered))  # disjoint
        assert set().union(*covered) == needed  # nothing decoded for nothing
        # every window lies inside its read
        assert (starts >= plan.lo[plan.read]).all()
        assert (starts + counts <= plan.hi[plan.read]).all()


def test_batch_inside_one_chunk_reads_it_once(
    tmp_path: Path, image_schema: DatasetSchema, strategy: str
) -> None:
    rows = example_rows(image_schema, 100, seed=0)
    backend = make_backend(
        tmp_path / "ds", image_schema, chunk_bytes=1 << 20, cache_pool_bytes=0, fold_bytes=0
    )
    backend.add_episode(rows, terminated=True, truncated=False)
    rng = np.random.default_rng(1)
    starts = rng.integers(0, 100 - 9, size=64)
    request = _request(np.zeros(64), starts, np.full(64, 9), 9, image_schema.qualified_keys)
    before = _file_reads()
    out = backend.gather_rows(request)
    # one chunk per field holds all 100 rows: one file read per field for 64 windows
    assert _file_reads() - before == len(image_schema.qualified_keys)
    for key in image_schema.qualified_keys:
        np.testing.assert_array_equal(out[key], _reference([rows], request, key), err_msg=key)
    backend.close()


def test_batch_reads_each_touched_chunk_once(
    tmp_path: Path, image_schema: DatasetSchema, strategy: str
) -> None:
    lengths = [40, 25, 60, 33]
    stored = [example_rows(image_schema, n, seed=i) for i, n in enumerate(lengths)]
    backend = make_backend(
        tmp_path / "ds",
        image_schema,
        chunk_rows={"observation/camera": 7},
        cache_pool_bytes=0,
        fold_bytes=0,
    )
    for rows in stored:
        backend.add_episode(rows, terminated=False, truncated=True)
    rng = np.random.default_rng(2)
    episodes = rng.integers(0, 4, size=48)
    starts = np.array([rng.integers(0, lengths[e] - 5 + 1) for e in episodes])
    request = _request(episodes, starts, np.full(48, 5), 5, ["observation/camera"])
    bases = np.cumsum([0, *lengths])[episodes] + starts
    chunks = {int(c) for b in bases for c in range(b // 7, (b + 4) // 7 + 1)}
    before = _file_reads()
    out = backend.gather_rows(request)
    assert _file_reads() - before == len(chunks)  # not 48 windows' worth
    np.testing.assert_array_equal(
        out["observation/camera"], _reference(stored, request, "observation/camera")
    )
    backend.close()


@pytest.mark.parametrize("chunk_rows", [1, 2, 5, 64])
def test_padded_overlapping_and_ongoing_windows(
    tmp_path: Path, image_schema: DatasetSchema, chunk_rows: int, strategy: str
) -> None:
    keys = image_schema.qualified_keys
    backend = make_backend(
        tmp_path / "ds", image_schema, chunk_rows=dict.fromkeys(keys, chunk_rows)
    )
    lengths = [12, 3, 1, 20, 7]
    stored = [example_rows(image_schema, n, seed=10 + i) for i, n in enumerate(lengths)]
    for rows in stored[:4]:
        backend.add_episode(rows, terminated=True, truncated=False)
    ongoing = backend.start_episode({k: v[:2] for k, v in stored[4].items()})
    backend.append_rows(ongoing, {k: v[2:] for k, v in stored[4].items()})
    rng = np.random.default_rng(3)
    num_rows = 6
    episodes = rng.integers(0, 5, size=100)
    counts = np.minimum([lengths[e] for e in episodes], num_rows)
    starts = np.array(
        [rng.integers(0, lengths[e] - c + 1) for e, c in zip(episodes, counts, strict=True)]
    )
    offsets = rng.integers(0, num_rows - counts + 1)
    request = _request(episodes, starts, counts, num_rows, keys, offsets)
    out = backend.gather_rows(request)
    for key in keys:
        np.testing.assert_array_equal(out[key], _reference(stored, request, key), err_msg=key)
    # a reader in another process sees the ongoing episode through its flushed rows
    backend.flush()
    from episodata_zarr import ZarrBackend, ZarrOptions

    reader = ZarrBackend.open(str(tmp_path / "ds"), ZarrOptions(), writable=False)
    out = reader.gather_rows(request)
    for key in keys:
        np.testing.assert_array_equal(out[key], _reference(stored, request, key), err_msg=key)
    reader.close()
    backend.close()
