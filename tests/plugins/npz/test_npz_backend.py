from __future__ import annotations

import json
import zipfile
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np
import pytest
from pydantic import ValidationError

from episodata_core.dataset import Dataset
from episodata_core.errors import SchemaError
from episodata_core.protocols import GatherRequest
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import PersistentBackendTests, example_rows, example_schema
from episodata_npz import NpzDirectoryBackend, NpzDirectoryOptions
from episodata_npz._archive import member_name

if TYPE_CHECKING:
    from pathlib import Path

META = {
    "episode/id",
    "episode/length",
    "episode/terminated",
    "episode/truncated",
    "episode/ongoing",
}


class TestNpzDirectoryBackend(PersistentBackendTests[NpzDirectoryBackend]):
    backend_cls = NpzDirectoryBackend


# -- helpers --------------------------------------------------------------------------------


def _create(tmp_path: Path, schema: DatasetSchema | None = None, **options: Any) -> Dataset:
    return Dataset.create(
        schema or example_schema(), tmp_path / "ds", backend="npz_directory", **options
    )


def _backend(dataset: Dataset) -> NpzDirectoryBackend:
    backend = dataset.backend
    assert isinstance(backend, NpzDirectoryBackend)
    return backend


def _archive(tmp_path: Path, episode: int, folder: str = "episodes") -> Path:
    return tmp_path / "ds" / folder / f"episode_{episode:09d}.npz"


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Size, mtime and content of every file (dotfiles included)."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def member_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of every zip member opened for reading (each open decompresses it once)."""
    opened: list[str] = []
    original = zipfile.ZipFile.open

    def counting_open(self: zipfile.ZipFile, name: Any, mode: str = "r", **kwargs: Any) -> Any:
        if mode == "r":
            opened.append(name if isinstance(name, str) else name.filename)
        return original(self, name, mode, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", counting_open)
    return opened


# -- the files are plain NumPy archives -----------------------------------------------------


def test_archive_loads_with_plain_numpy(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    schema = dataset.schema
    rows = example_rows(schema, 6, seed=1, absent=("observation/depth",))
    _backend(dataset).add_episode(rows, terminated=True, truncated=False)
    dataset.close()

    with np.load(_archive(tmp_path, 0), allow_pickle=False) as archive:
        assert set(archive.files) == META | (set(schema.qualified_keys) - {"observation/depth"})
        for key, values in rows.items():
            assert archive[key].dtype == values.dtype, key
            np.testing.assert_array_equal(archive[key], values, err_msg=key)
        assert archive["episode/id"] == 0
        assert archive["episode/length"] == 5
        assert bool(archive["episode/terminated"])
        assert not bool(archive["episode/truncated"])
        assert not bool(archive["episode/ongoing"])
    with zipfile.ZipFile(_archive(tmp_path, 0)) as raw:
        assert {info.compress_type for info in raw.infolist()} == {zipfile.ZIP_DEFLATED}


def test_ongoing_spill_loads_with_plain_numpy(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    rows = example_rows(dataset.schema, 4, seed=2)
    _backend(dataset).start_episode(rows)
    dataset.flush()
    with np.load(_archive(tmp_path, 0, "ongoing"), allow_pickle=False) as spill:
        assert bool(spill["episode/ongoing"])
        assert spill["episode/length"] == 3
        np.testing.assert_array_equal(spill["observation/camera"], rows["observation/camera"])
    dataset.close()


def test_string_fields_round_trip_as_fixed_width_dtypes(tmp_path: Path) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("text", shape=(2,), dtype="<U7"),
            FieldSpec("tag", shape=(), dtype="S4", role="info"),
            FieldSpec("move", shape=(), dtype="int8", role="action"),
        ]
    )
    rows = {
        "observation/text": np.array([["héllo", "wörld"], ["日本語", ""], ["a", "bcdefgh"]]),
        "info/tag": np.array([b"ab", b"\x00cd", b"wxyz"], dtype="S4"),
        "action/move": np.array([0, 1, -1], dtype=np.int8),
    }
    dataset = _create(tmp_path, schema)
    _backend(dataset).add_episode(rows, terminated=False, truncated=True)
    _backend(dataset).start_episode(rows)
    dataset.close()

    with np.load(_archive(tmp_path, 0), allow_pickle=False) as archive:
        assert archive["observation/text"].dtype == np.dtype("<U7")
        np.testing.assert_array_equal(archive["observation/text"], rows["observation/text"])
        np.testing.assert_array_equal(archive["info/tag"], rows["info/tag"])
    reopened = Dataset.open(tmp_path / "ds", read_only=True)
    for episode in (0, 1):
        stored = reopened.backend.read_rows(episode, 0, 3, list(rows))
        for key, values in rows.items():
            assert stored[key].dtype == values.dtype
            np.testing.assert_array_equal(stored[key], values)
    reopened.close()


def test_unusual_keys_get_safe_reversible_member_names(tmp_path: Path) -> None:
    assert member_name("action/keyboard/jump") == "action/keyboard/jump"
    assert member_name("observation/..") == "observation/%2E."
    assert member_name("observation/a b:c\\d%") == "observation/a%20b%3Ac%5Cd%25"
    schema = DatasetSchema(
        [
            FieldSpec("..", shape=(), dtype="float32"),
            FieldSpec("a b/.hidden", shape=(), dtype="float32"),
        ]
    )
    rows = example_rows(schema, 3, seed=3)
    dataset = _create(tmp_path, schema)
    _backend(dataset).add_episode(rows, terminated=True, truncated=False)
    dataset.close()
    with np.load(_archive(tmp_path, 0), allow_pickle=False) as archive:
        stored = {"/".join(unquote(p) for p in name.split("/")) for name in archive.files}
        assert stored == set(rows) | META
    reopened = Dataset.open(tmp_path / "ds", read_only=True)
    np.testing.assert_array_equal(
        reopened.backend.read_rows(0, 0, 3, ["observation/a b/.hidden"])["observation/a b/.hidden"],
        rows["observation/a b/.hidden"],
    )
    reopened.close()


def test_uncompressed_option_stores_members(tmp_path: Path) -> None:
    dataset = _create(tmp_path, compress=False)
    _backend(dataset).add_episode(
        example_rows(dataset.schema, 3, seed=4), terminated=True, truncated=False
    )
    dataset.close()
    with zipfile.ZipFile(_archive(tmp_path, 0)) as raw:
        assert {info.compress_type for info in raw.infolist()} == {zipfile.ZIP_STORED}
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["backend_options"]["compress"] is False


def test_options_are_validated() -> None:
    with pytest.raises(ValidationError, match="extra"):
        NpzDirectoryOptions(compression="zstd")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="cache_bytes"):
        NpzDirectoryOptions(cache_bytes=-1)


def test_create_needs_a_folder() -> None:
    with pytest.raises(SchemaError, match="needs a folder"):
        NpzDirectoryBackend.create(example_schema(), None, NpzDirectoryOptions())


# -- finalize cost does not grow with the number of episodes -------------------------------


def test_commit_rewrites_no_existing_file(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    backend = _backend(dataset)
    schema = dataset.schema
    for seed in range(30):
        backend.add_episode(example_rows(schema, 4, seed=seed), terminated=True, truncated=False)
    flushed = backend.start_episode(example_rows(schema, 3, seed=99))
    dataset.flush()
    ongoing = example_rows(schema, 5, seed=100)
    finishing = backend.start_episode({k: v[:2] for k, v in ongoing.items()})
    backend.append_rows(finishing, {k: v[2:] for k, v in ongoing.items()})
    dataset.flush()
    folder = tmp_path / "ds"

    for commit in ("add", "finalize"):
        before = _snapshot(folder)
        if commit == "add":
            backend.add_episode(example_rows(schema, 4, seed=7), terminated=True, truncated=False)
        else:
            backend.finalize_episode(finishing, terminated=False, truncated=True)
        after = _snapshot(folder)
        log_before, log_after = before.pop("episodes.jsonl")[2], after.pop("episodes.jsonl")[2]
        # the log only grows, by exactly one line
        assert log_after.startswith(log_before)
        assert log_after[len(log_before) :].count(b"\n") == 1
        changed = {name for name in before if after.get(name) != before[name]}
        added = set(after) - set(before)
        if commit == "add":
            assert changed == set()
            assert added == {f"episodes/episode_{len(dataset) - 1:09d}.npz"}
        else:
            # only its own spill goes away; every other file is untouched
            assert changed == {f"ongoing/episode_{finishing:09d}.npz"}
            assert f"ongoing/episode_{finishing:09d}.npz" not in after
            assert added == {f"episodes/episode_{finishing:09d}.npz"}
    assert backend.episode_table().ongoing.tolist()[flushed] is True
    dataset.close()


def test_commit_persists_reset_row_of_earlier_ongoing_episode(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    backend = _backend(dataset)
    schema = dataset.schema
    ongoing = example_rows(schema, 6, seed=1)
    earlier = backend.start_episode(ongoing)
    assert not _archive(tmp_path, earlier, "ongoing").exists()  # buffered in memory
    later = example_rows(schema, 3, seed=2)
    backend.add_episode(later, terminated=True, truncated=False)
    # a crash now would keep episode 1; episode 0 must not leave a hole in the ids
    reader = Dataset.open(tmp_path / "ds", read_only=True)
    table = reader.backend.episode_table()
    assert table.ongoing.tolist() == [True, False]
    assert table.length.tolist() == [0, 2]
    stored = reader.backend.read_rows(0, 0, 1, ["observation/state"])["observation/state"]
    np.testing.assert_array_equal(stored, ongoing["observation/state"][:1])
    reader.close()
    # the spill is written once: a second commit leaves it alone
    spill = _archive(tmp_path, earlier, "ongoing").stat().st_mtime_ns
    backend.add_episode(later, terminated=True, truncated=False)
    assert _archive(tmp_path, earlier, "ongoing").stat().st_mtime_ns == spill
    dataset.close()  # close flushes the whole episode
    reopened = Dataset.open(tmp_path / "ds", read_only=True)
    assert reopened.backend.episode_table().length.tolist() == [5, 2, 2]
    reopened.close()


# -- reads ----------------------------------------------------------------------------------


def _three_episodes(tmp_path: Path, **options: Any) -> tuple[Dataset, list[dict[str, Any]]]:
    dataset = _create(tmp_path, **options)
    rows = [example_rows(dataset.schema, 10, seed=seed) for seed in range(3)]
    for r in rows:
        _backend(dataset).add_episode(r, terminated=True, truncated=False)
    return dataset, rows


def _request(fields: tuple[str, ...]) -> GatherRequest:
    episodes = np.array([2, 0, 2, 1, 0, 2, 1, 1, 0, 2, 0, 1], dtype=np.int64)
    return GatherRequest(
        episodes=episodes,
        starts=np.arange(12, dtype=np.int64) % 6,
        counts=np.full(12, 4, dtype=np.int64),
        offsets=np.zeros(12, dtype=np.int64),
        num_rows=4,
        fields=fields,
    )


def test_gather_decompresses_each_member_once_per_call(
    tmp_path: Path, member_reads: list[str]
) -> None:
    dataset, rows = _three_episodes(tmp_path, cache_bytes=0)
    fields = ("observation/camera", "action/camera")
    request = _request(fields)
    for _ in range(2):  # no cache: every call decodes again, but each member only once
        member_reads.clear()
        out = dataset.backend.gather_rows(request)
        assert sorted(member_reads) == sorted(f"{key}.npy" for key in fields for _ in range(3))
    for b in range(len(request)):
        e, s = int(request.episodes[b]), int(request.starts[b])
        np.testing.assert_array_equal(
            out["observation/camera"][b], rows[e]["observation/camera"][s : s + 4]
        )
    member_reads.clear()
    window = dataset.backend.read_rows(1, 2, 7, ["observation/state", "reward/reward"])
    assert sorted(member_reads) == ["observation/state.npy", "reward/reward.npy"]
    np.testing.assert_array_equal(window["observation/state"], rows[1]["observation/state"][2:7])
    dataset.close()


def test_cache_serves_later_calls_within_its_budget(
    tmp_path: Path, member_reads: list[str]
) -> None:
    dataset, _ = _three_episodes(tmp_path)
    request = _request(("observation/camera",))
    first = dataset.backend.gather_rows(request)
    assert len(member_reads) == 3
    member_reads.clear()
    second = dataset.backend.gather_rows(request)
    assert member_reads == []
    np.testing.assert_array_equal(first["observation/camera"], second["observation/camera"])
    # cached arrays cannot be changed through a read
    window = dataset.backend.read_rows(0, 0, 3, ["observation/camera"])["observation/camera"]
    assert not window.flags.writeable
    dataset.close()

    one_field = 10 * 2 * 4 * 4  # bytes of one decoded camera field
    small = Dataset.open(tmp_path / "ds", cache_bytes=2 * one_field)
    small.backend.gather_rows(request)
    assert _backend(small)._cache.nbytes <= 2 * one_field
    member_reads.clear()
    small.backend.read_rows(2, 0, 1, ["observation/camera"])  # most recent: still cached
    assert member_reads == []
    small.close()


def test_reader_refresh_reads_only_new_log_lines(tmp_path: Path, member_reads: list[str]) -> None:
    writer, _rows = _three_episodes(tmp_path)
    reader = Dataset.open(tmp_path / "ds", read_only=True)
    backend = writer.backend
    added = example_rows(writer.schema, 5, seed=50)
    backend.add_episode(added, terminated=False, truncated=True)
    member_reads.clear()
    reader.refresh()
    assert member_reads == []  # the index comes from the new log line, not the archive
    assert reader.backend.episode_table().truncated.tolist() == [False, False, False, True]
    reader.close()
    writer.close()


def test_reader_follows_an_ongoing_episode(tmp_path: Path) -> None:
    writer = _create(tmp_path)
    backend = writer.backend
    rows = example_rows(writer.schema, 8, seed=5)
    episode = backend.start_episode({k: v[:3] for k, v in rows.items()})
    writer.flush()
    reader = Dataset.open(tmp_path / "ds", read_only=True)
    assert reader.backend.episode_table().length.tolist() == [2]
    backend.append_rows(episode, {k: v[3:6] for k, v in rows.items()})
    writer.flush()
    reader.refresh()
    assert reader.backend.episode_table().length.tolist() == [5]
    backend.append_rows(episode, {k: v[6:] for k, v in rows.items()})
    backend.finalize_episode(episode, terminated=True, truncated=False)
    reader.refresh()
    table = reader.backend.episode_table()
    assert table.ongoing.tolist() == [False]
    assert table.terminated.tolist() == [True]
    np.testing.assert_array_equal(
        reader.backend.read_rows(0, 0, 8, ["observation/state"])["observation/state"],
        rows["observation/state"],
    )
    reader.close()
    writer.close()
