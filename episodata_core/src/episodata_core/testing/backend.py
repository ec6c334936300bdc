"""``BackendTests``: the conformance tests every storage backend passes.

A backend's test module subclasses it and fills in the class attribute and fixture::

    class TestMyBackend(BackendTests[MyBackend]):
        backend_cls = MyBackend

        @pytest.fixture
        def location(self, tmp_path: Path) -> str | None:
            return str(tmp_path / "dataset")

The expected values in these tests come from the episodes the tests themselves build
(kept as plain arrays), never from the backend under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError, EpisodataError, SchemaError
from episodata_core.protocols import EpisodeRows, GatherRequest, StorageBackend, SupportsAddEpisodes
from episodata_core.registry import get_backend
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing.crash import (
    SEEDS_ENV,
    chain_kills,
    chain_seeds,
    record,
    run_kill_chain,
)

if TYPE_CHECKING:
    import numpy.typing as npt
    from pydantic import BaseModel

    from episodata_core.protocols import EpisodeTable, Rows

__all__ = ["BackendTests", "PersistentBackendTests", "example_rows", "example_schema"]

B = TypeVar("B", bound=StorageBackend)


def example_schema() -> DatasetSchema:
    """A schema with nested, image, optional and same-key-in-two-roles fields."""
    return DatasetSchema(
        [
            FieldSpec("state", shape=(3,), dtype="float32"),
            FieldSpec("camera", shape=(2, 4, 4), dtype="uint8", layout="CHW"),
            FieldSpec("depth", shape=(4,), dtype="float32", optional=True),
            FieldSpec("camera", shape=(2,), dtype="float32", role="action"),
            FieldSpec("keyboard/jump", shape=(), dtype="bool", role="action"),
            FieldSpec("reward", shape=(), dtype="float32", role="reward"),
            FieldSpec("step_idx", shape=(), dtype="int64", role="info"),
        ]
    )


def example_rows(
    schema: DatasetSchema, num_rows: int, seed: int, *, absent: tuple[str, ...] = ()
) -> dict[str, npt.NDArray[Any]]:
    """Distinct, seed-dependent rows for every field (action/reward row 0 is zero)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, npt.NDArray[Any]] = {}
    for spec in schema:
        if spec.qualified_key in absent:
            continue
        shape = (num_rows, *spec.shape)
        if spec.np_dtype.kind == "b":
            values = rng.integers(0, 2, size=shape).astype(bool)
        elif spec.np_dtype.kind in "iu":
            values = rng.integers(0, 200, size=shape).astype(spec.np_dtype)
        else:
            values = rng.normal(size=shape).astype(spec.np_dtype)
        if spec.role in ("action", "reward"):
            values[:1] = 0
        rows[spec.qualified_key] = values
    return rows


def _concat(parts: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def _scribble(array: npt.NDArray[Any]) -> None:
    """Change every element of ``array`` in place."""
    if array.dtype.kind == "b":
        np.logical_not(array, out=array)
    else:
        np.add(array, 1, out=array, casting="unsafe")


def _reference_gather(
    episodes: dict[int, dict[str, npt.NDArray[Any]]], request: GatherRequest, key: str
) -> npt.NDArray[Any]:
    """A slow, obviously correct gather: one Python loop per selection and row."""
    first = next(iter(episodes.values()))[key]
    out = np.zeros((len(request), request.num_rows, *first.shape[1:]), dtype=first.dtype)
    for b in range(len(request)):
        rows = episodes[int(request.episodes[b])]
        for j in range(int(request.counts[b])):
            if key in rows:
                out[b, int(request.offsets[b]) + j] = rows[key][int(request.starts[b]) + j]
    return out


class BackendTests(Generic[B]):
    """Conformance tests for a :class:`~episodata_core.protocols.StorageBackend`."""

    backend_cls: ClassVar[type[Any]]
    add_episodes_all_or_none: ClassVar[bool] = False
    """Whether ``add_episodes`` commits all its episodes at once (a crash leaves all or none)."""

    # -- fixtures and helpers a subclass may override --------------------------------------

    @pytest.fixture
    def location(self) -> str | None:
        """Where to create datasets; ``None`` for backends without a location."""
        return None

    @pytest.fixture
    def options(self) -> dict[str, Any]:
        """Backend options for the tests."""
        return {}

    @pytest.fixture
    def schema(self) -> DatasetSchema:
        """The schema most tests use."""
        return example_schema()

    @pytest.fixture
    def backend(self, schema: DatasetSchema, location: str | None, options: dict[str, Any]) -> B:
        """A freshly created, empty backend."""
        return self.create(schema, location, options)

    def create(self, schema: DatasetSchema, location: str | None, options: dict[str, Any]) -> B:
        """Create a backend through its public classmethod.

        Like the core, the kit creates the (empty) dataset folder first.
        """
        if location is not None:
            Path(location).mkdir(parents=True, exist_ok=True)
        opts: BaseModel = self.backend_cls.Options(**options)
        backend: B = self.backend_cls.create(schema, location, opts)
        return backend

    def reopen(self, backend: B, options: dict[str, Any]) -> B:
        """Close ``backend`` and open its location again (persistent backends only)."""
        self._require_persistence()
        location = getattr(backend, "location")  # noqa: B009 (not in the base Protocol)
        backend.close()
        opened: B = self.backend_cls.open(
            location, self.backend_cls.Options(**options), writable=False
        )
        return opened

    def _require_persistence(self) -> None:
        # SupportsPersistence has a property, so issubclass() cannot check it structurally
        if not callable(getattr(self.backend_cls, "open", None)):
            pytest.skip(f"{self.backend_cls.__name__} does not store datasets at a location")

    def read_all(self, backend: B, episode: int) -> dict[str, npt.NDArray[Any]]:
        """Every present field of one episode, through ``read_rows``."""
        table = backend.episode_table()
        fields = [
            key
            for key in backend.schema.qualified_keys
            if key not in table.present or table.present[key][episode]
        ]
        rows = backend.read_rows(episode, 0, int(table.length[episode]) + 1, fields)
        return {key: np.array(value) for key, value in rows.items()}

    def assert_episode(self, backend: B, episode: int, expected: Rows) -> None:
        """The stored rows of ``episode`` equal ``expected``, field by field."""
        stored = self.read_all(backend, episode)
        assert sorted(stored) == sorted(expected)
        for key, values in expected.items():
            assert stored[key].dtype == values.dtype, key
            np.testing.assert_array_equal(stored[key], values, err_msg=key)

    # -- plugin contract ------------------------------------------------------------------

    def test_declares_plugin_metadata(self) -> None:
        cls = self.backend_cls
        assert isinstance(cls.name, str)
        assert cls.name
        assert isinstance(cls.description, str)
        assert cls.description
        assert hasattr(cls.Options, "model_validate")

    def test_registered_under_its_name(self) -> None:
        assert get_backend(self.backend_cls.name) is self.backend_cls

    # -- writes and reads -----------------------------------------------------------------

    def test_new_backend_is_empty(self, backend: B, schema: DatasetSchema) -> None:
        assert len(backend.episode_table()) == 0
        assert backend.schema == schema

    def test_add_episode_round_trips(self, backend: B, schema: DatasetSchema) -> None:
        rows = example_rows(schema, 6, seed=1)
        assert backend.add_episode(rows, terminated=True, truncated=False) == 0
        table = backend.episode_table()
        assert table.length.tolist() == [5]
        assert table.terminated.tolist() == [True]
        assert table.truncated.tolist() == [False]
        assert table.ongoing.tolist() == [False]
        self.assert_episode(backend, 0, rows)

    def test_episode_ids_count_up(self, backend: B, schema: DatasetSchema) -> None:
        ids = [
            backend.add_episode(example_rows(schema, n, seed=n), terminated=False, truncated=True)
            for n in (3, 1, 7)
        ]
        assert ids == [0, 1, 2]
        assert backend.episode_table().length.tolist() == [2, 0, 6]
        for episode, n in enumerate((3, 1, 7)):
            self.assert_episode(backend, episode, example_rows(schema, n, seed=n))

    def test_step_writes_and_finalize(self, backend: B, schema: DatasetSchema) -> None:
        rows = example_rows(schema, 5, seed=2)
        episode = backend.start_episode({k: v[:1] for k, v in rows.items()})
        table = backend.episode_table()
        assert table.ongoing.tolist() == [True]
        assert table.length.tolist() == [0]
        backend.append_rows(episode, {k: v[1:3] for k, v in rows.items()})
        self.assert_episode(backend, episode, {k: v[:3] for k, v in rows.items()})
        backend.append_rows(episode, {k: v[3:] for k, v in rows.items()})
        assert backend.episode_table().length.tolist() == [4]
        backend.finalize_episode(episode, terminated=False, truncated=True)
        table = backend.episode_table()
        assert table.ongoing.tolist() == [False]
        assert table.truncated.tolist() == [True]
        self.assert_episode(backend, episode, rows)

    def test_interleaved_episodes_finalized_out_of_order(
        self, backend: B, schema: DatasetSchema
    ) -> None:
        rows = [example_rows(schema, 4 + i, seed=10 + i) for i in range(3)]
        ids = [backend.start_episode({k: v[:1] for k, v in r.items()}) for r in rows]
        for t in range(1, 7):
            for episode, r in zip(ids, rows, strict=True):
                if t < len(r["observation/state"]):
                    backend.append_rows(episode, {k: v[t : t + 1] for k, v in r.items()})
        backend.finalize_episode(ids[2], terminated=True, truncated=False)
        backend.finalize_episode(ids[0], terminated=False, truncated=False)
        table = backend.episode_table()
        assert table.ongoing.tolist() == [False, True, False]
        assert table.terminated.tolist() == [False, False, True]
        for episode, r in zip(ids, rows, strict=True):
            self.assert_episode(backend, episode, r)
        backend.finalize_episode(ids[1], terminated=True, truncated=True)
        assert backend.episode_table().truncated.tolist() == [False, True, False]
        self.assert_episode(backend, ids[1], rows[1])

    def test_zero_length_episode(self, backend: B, schema: DatasetSchema) -> None:
        rows = example_rows(schema, 1, seed=3)
        backend.add_episode(rows, terminated=False, truncated=False)
        assert backend.episode_table().length.tolist() == [0]
        self.assert_episode(backend, 0, rows)

    def test_optional_field_absent(self, backend: B, schema: DatasetSchema) -> None:
        with_depth = example_rows(schema, 3, seed=4)
        without = example_rows(schema, 4, seed=5, absent=("observation/depth",))
        backend.add_episode(with_depth, terminated=False, truncated=False)
        backend.add_episode(without, terminated=False, truncated=False)
        ongoing = example_rows(schema, 2, seed=6, absent=("observation/depth",))
        backend.start_episode(ongoing)
        present = backend.episode_table().present["observation/depth"]
        assert present.tolist() == [True, False, False]
        self.assert_episode(backend, 0, with_depth)
        self.assert_episode(backend, 1, without)
        self.assert_episode(backend, 2, ongoing)

    def test_read_rows_window(self, backend: B, schema: DatasetSchema) -> None:
        rows = example_rows(schema, 9, seed=7)
        backend.add_episode(rows, terminated=False, truncated=False)
        window = backend.read_rows(0, 2, 6, ["observation/state", "action/camera"])
        assert sorted(window) == ["action/camera", "observation/state"]
        np.testing.assert_array_equal(window["observation/state"], rows["observation/state"][2:6])
        np.testing.assert_array_equal(window["action/camera"], rows["action/camera"][2:6])

    # -- batched gathers ------------------------------------------------------------------

    def _fill(self, backend: B, schema: DatasetSchema) -> dict[int, dict[str, npt.NDArray[Any]]]:
        """Finalized, ongoing and optional-less episodes of assorted lengths."""
        episodes: dict[int, dict[str, npt.NDArray[Any]]] = {}
        for seed, n in enumerate((12, 3, 20, 1, 8)):
            absent = ("observation/depth",) if seed % 2 else ()
            rows = example_rows(schema, n, seed=100 + seed, absent=absent)
            episodes[backend.add_episode(rows, terminated=seed == 2, truncated=False)] = rows
        ongoing = example_rows(schema, 7, seed=200)
        episode = backend.start_episode({k: v[:4] for k, v in ongoing.items()})
        backend.append_rows(episode, {k: v[4:] for k, v in ongoing.items()})
        episodes[episode] = ongoing
        return episodes

    def _check_gather(
        self, backend: B, episodes: dict[int, dict[str, npt.NDArray[Any]]], request: GatherRequest
    ) -> None:
        out = backend.gather_rows(request)
        assert sorted(out) == sorted(request.fields)
        for key in request.fields:
            expected = _reference_gather(episodes, request, key)
            assert out[key].shape == expected.shape, key
            assert out[key].dtype == expected.dtype, key
            np.testing.assert_array_equal(out[key], expected, err_msg=key)

    def test_gather_dense_windows(self, backend: B, schema: DatasetSchema) -> None:
        episodes = self._fill(backend, schema)
        rng = np.random.default_rng(0)
        lengths = {e: len(r["observation/state"]) for e, r in episodes.items()}
        eligible = [e for e, n in lengths.items() if n >= 4]
        chosen = rng.choice(eligible, size=32)
        starts = np.array([rng.integers(0, lengths[e] - 4 + 1) for e in chosen])
        request = GatherRequest(
            episodes=chosen.astype(np.int64),
            starts=starts.astype(np.int64),
            counts=np.full(32, 4, dtype=np.int64),
            offsets=np.zeros(32, dtype=np.int64),
            num_rows=4,
            fields=schema.qualified_keys,
        )
        self._check_gather(backend, episodes, request)

    @pytest.mark.parametrize("padding", ["suffix", "prefix"])
    def test_gather_padded_windows(self, backend: B, schema: DatasetSchema, padding: str) -> None:
        episodes = self._fill(backend, schema)
        num_rows = 10
        chosen = np.array(sorted(episodes), dtype=np.int64)
        counts = np.array(
            [min(len(episodes[e]["observation/state"]), num_rows) for e in chosen], dtype=np.int64
        )
        offsets = np.zeros_like(counts) if padding == "suffix" else num_rows - counts
        request = GatherRequest(
            episodes=chosen,
            starts=np.zeros_like(counts),
            counts=counts,
            offsets=offsets,
            num_rows=num_rows,
            fields=schema.qualified_keys,
        )
        self._check_gather(backend, episodes, request)

    def test_gather_empty_batch(self, backend: B, schema: DatasetSchema) -> None:
        episodes = self._fill(backend, schema)
        empty = np.zeros(0, dtype=np.int64)
        request = GatherRequest(empty, empty, empty, empty, num_rows=3, fields=("reward/reward",))
        self._check_gather(backend, episodes, request)

    def test_writable_reads_are_private_copies(self, backend: B, schema: DatasetSchema) -> None:
        # an array a read returns either is read-only (it may be a view of storage or a
        # cache) or belongs to the caller: writing into it never changes a later read
        episodes = self._fill(backend, schema)
        expected = {e: {k: v.copy() for k, v in rows.items()} for e, rows in episodes.items()}
        table = backend.episode_table()
        handed_out: list[npt.NDArray[Any]] = []
        for episode, rows in episodes.items():
            stop = int(table.length[episode]) + 1
            for first, last in ((0, stop), (1, max(1, stop - 1))):
                handed_out += backend.read_rows(episode, first, last, list(rows)).values()
        chosen = np.array(sorted(episodes), dtype=np.int64)
        counts = np.array([min(len(expected[e]["observation/state"]), 3) for e in chosen])
        for num_rows in (3, 5):  # dense, then padded windows
            request = GatherRequest(
                episodes=chosen,
                starts=np.zeros_like(chosen),
                counts=counts.astype(np.int64),
                offsets=np.zeros_like(chosen),
                num_rows=num_rows,
                fields=schema.qualified_keys,
            )
            handed_out += backend.gather_rows(request).values()
        for array in handed_out:
            if array.flags.writeable:
                _scribble(array)
            else:
                with pytest.raises(ValueError, match="read-only"):
                    array[...] = 0
        for episode, rows in expected.items():
            self.assert_episode(backend, episode, rows)

    # -- batch writes ---------------------------------------------------------------------

    def _require_add_episodes(self, backend: object) -> SupportsAddEpisodes:
        if isinstance(backend, SupportsAddEpisodes):
            return backend
        pytest.skip(f"{self.backend_cls.__name__} has no add_episodes (the core loops)")

    def test_add_episodes_equals_a_loop(
        self, backend: B, schema: DatasetSchema, location: str | None, options: dict[str, Any]
    ) -> None:
        batch_backend = self._require_add_episodes(backend)
        ongoing = example_rows(schema, 3, seed=299)
        backend.start_episode(ongoing)  # ids continue after an ongoing episode
        assert batch_backend.add_episodes([]) == []
        batch = _example_batch(schema)
        ids = batch_backend.add_episodes(batch)
        loop = self.create(schema, _sibling(location, "loop"), options)
        loop.start_episode(ongoing)
        looped = [
            loop.add_episode(e.rows, terminated=e.terminated, truncated=e.truncated) for e in batch
        ]
        assert ids == looped == [1, 2, 3, 4]
        _assert_same_table(backend.episode_table(), loop.episode_table())
        self.assert_episode(backend, 0, ongoing)
        for episode, e in zip(ids, batch, strict=True):
            self.assert_episode(backend, episode, e.rows)
        loop.close()

    def test_dataset_add_episodes_equals_a_loop(
        self, schema: DatasetSchema, location: str | None, options: dict[str, Any]
    ) -> None:
        name = self.backend_cls.name
        batch = _example_batch(schema)
        dataset = Dataset.create(schema, location, backend=name, **options)
        loop = Dataset.create(schema, _sibling(location, "loop"), backend=name, **options)
        for target in (dataset, loop):
            target.add_episode(_bulk_from_rows(schema, example_rows(schema, 2, seed=298)))
        # a generator: add_episodes takes any iterable, once
        ids = dataset.add_episodes(_bulk_of(schema, e) for e in batch)
        looped = [loop.add_episode(_bulk_of(schema, e)) for e in batch]
        assert ids == looped == [1, 2, 3, 4]
        assert dataset.add_episodes(iter([])) == []
        _assert_same_table(dataset.backend.episode_table(), loop.backend.episode_table())
        for episode, e in zip(ids, batch, strict=True):
            self.assert_episode(dataset.backend, episode, e.rows)  # type: ignore[arg-type]
        dataset.close()
        loop.close()

    def test_dataset_add_episodes_bad_input_changes_nothing(
        self, schema: DatasetSchema, location: str | None, options: dict[str, Any]
    ) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name, **options)
        dataset.add_episode(_bulk_from_rows(schema, example_rows(schema, 3, seed=297)))
        before = _files(location)
        good = [_bulk_of(schema, e) for e in _example_batch(schema)]
        bad = _bulk_from_rows(schema, example_rows(schema, 4, seed=296))
        bad["actions"]["camera"] = np.zeros((3, 3), dtype=np.float32)
        with pytest.raises(SchemaError, match=r"episode 2 \(item 1 of add_episodes\).*'camera'"):
            dataset.add_episodes([good[0], bad, good[1]])
        with pytest.raises(SchemaError, match="got one dict"):
            dataset.add_episodes(good[0])  # type: ignore[arg-type]
        assert dataset.num_episodes == 1
        assert _files(location) == before
        # the next batch gets the ids the rejected one would have had
        assert dataset.add_episodes(good[:2]) == [1, 2]
        dataset.close()

    # -- through the public API -----------------------------------------------------------

    def test_dataset_round_trip(self, location: str | None, options: dict[str, Any]) -> None:
        frames = np.arange(4 * 2 * 3, dtype=np.uint8).reshape(4, 2, 3)
        episode = {
            "initial_observation": {
                "frame": frames[0],
                "state": np.array([1, 2], dtype=np.float32),
            },
            "observations": {
                "frame": frames[1:],
                "state": np.array([[3, 4], [5, 6], [7, 8]], dtype=np.float32),
            },
            "actions": np.array([1, 0, 1], dtype=np.int64),
            "rewards": np.array([0.5, 1.5, 2.5], dtype=np.float32),
            "terminated": True,
        }
        dataset = Dataset.from_episodes(
            [episode], path=location, backend=self.backend_cls.name, **options
        )
        segment = dataset.episode(0).read()
        np.testing.assert_array_equal(segment.obs.frame, frames[:3])
        np.testing.assert_array_equal(segment.next_obs.frame, frames[1:])
        np.testing.assert_array_equal(segment.all_obs.state, [[1, 2], [3, 4], [5, 6], [7, 8]])
        np.testing.assert_array_equal(segment.action, [1, 0, 1])
        np.testing.assert_array_equal(segment.reward, np.array([0.5, 1.5, 2.5], dtype=np.float32))
        assert segment.terminated.tolist() == [False, False, True]
        assert np.shares_memory(segment.obs.state, segment.next_obs.state)
        dataset.close()


class PersistentBackendTests(BackendTests[B]):
    """:class:`BackendTests` plus persistence, recovery and concurrency.

    Subclasses provide the ``location`` fixture (a path that does not exist yet). The kill
    chains (``episodata_core.testing.crash``) print their figures; ``pytest -s`` shows them.
    """

    kill_chain_kills: ClassVar[int] = 10
    """SIGKILLs in a row on one dataset, per chain."""

    @pytest.fixture
    def location(self, tmp_path: Path) -> str | None:
        """A fresh dataset folder inside pytest's temporary directory."""
        return str(tmp_path / "dataset")

    def open_dataset(self, location: str | None, **kwargs: Any) -> Dataset:
        """Open the dataset at ``location`` through the public API."""
        assert location is not None
        return Dataset.open(location, **kwargs)

    def _write(self, dataset: Dataset, seed: int, steps: int, *, finalize: bool = True) -> Rows:
        rows = example_rows(dataset.schema, steps + 1, seed=seed)
        if finalize:
            dataset.backend.add_episode(rows, terminated=seed % 2 == 0, truncated=seed % 2 == 1)
        else:
            dataset.backend.start_episode(rows)
        return rows

    def test_manifest_names_the_backend(self, location: str | None, schema: DatasetSchema) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        dataset.close()
        assert location is not None
        manifest = json.loads((Path(location) / "manifest.json").read_text())
        assert manifest["backend"] == self.backend_cls.name
        assert DatasetSchema.model_validate(manifest["schema"]) == schema

    def test_reopen_reads_identical(self, location: str | None, schema: DatasetSchema) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        expected = [self._write(dataset, seed, steps) for seed, steps in enumerate((5, 0, 9))]
        dataset.close()
        reopened = self.open_dataset(location, read_only=True)
        table = reopened.backend.episode_table()
        assert table.length.tolist() == [5, 0, 9]
        assert table.terminated.tolist() == [True, False, True]
        assert table.truncated.tolist() == [False, True, False]
        assert table.ongoing.tolist() == [False, False, False]
        for episode, rows in enumerate(expected):
            self.assert_episode(reopened.backend, episode, rows)  # type: ignore[arg-type]
        reopened.close()

    def test_finalized_episode_durable_without_close(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        writer = Dataset.create(schema, location, backend=self.backend_cls.name)
        rows = self._write(writer, 3, 6)
        # a second process would see exactly this: the writer never closed
        reader = self.open_dataset(location, read_only=True)
        assert reader.backend.episode_table().length.tolist() == [6]
        self.assert_episode(reader.backend, 0, rows)  # type: ignore[arg-type]
        reader.close()
        writer.close()

    def test_ongoing_episode_survives_reopen_after_flush(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        finished = self._write(dataset, 0, 4)
        rows = example_rows(schema, 9, seed=1)
        episode = dataset.backend.start_episode({k: v[:3] for k, v in rows.items()})
        dataset.backend.append_rows(episode, {k: v[3:6] for k, v in rows.items()})
        dataset.flush()
        # rows after the flush are not durable yet; a reader sees the flushed state only
        dataset.backend.append_rows(episode, {k: v[6:8] for k, v in rows.items()})
        reader = self.open_dataset(location, read_only=True)
        table = reader.backend.episode_table()
        assert table.ongoing.tolist() == [False, True]
        assert table.length.tolist() == [4, 5]
        self.assert_episode(reader.backend, 0, finished)  # type: ignore[arg-type]
        self.assert_episode(reader.backend, 1, {k: v[:6] for k, v in rows.items()})  # type: ignore[arg-type]
        reader.close()
        dataset.close()  # close flushes
        reopened = self.open_dataset(location)
        self.assert_episode(reopened.backend, 1, {k: v[:8] for k, v in rows.items()})  # type: ignore[arg-type]
        writer = reopened.resume_episode(1)
        reopened.backend.append_rows(writer.episode, {k: v[8:] for k, v in rows.items()})
        writer.end(terminated=True)
        assert reopened.backend.episode_table().ongoing.tolist() == [False, False]
        self.assert_episode(reopened.backend, 1, rows)  # type: ignore[arg-type]
        reopened.close()

    def test_reader_sees_new_episodes_after_refresh(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        writer = Dataset.create(schema, location, backend=self.backend_cls.name)
        self._write(writer, 0, 3)
        reader = self.open_dataset(location, read_only=True)
        assert reader.num_episodes == 1
        added = self._write(writer, 1, 7)
        reader.refresh()
        assert reader.num_episodes == 2
        self.assert_episode(reader.backend, 1, added)  # type: ignore[arg-type]
        reader.close()
        writer.close()

    def test_second_writer_is_refused(self, location: str | None, schema: DatasetSchema) -> None:
        assert location is not None
        writer = Dataset.create(schema, location, backend=self.backend_cls.name)
        # a writer in another process is refused, and told who holds the lock
        second = subprocess.run(
            [sys.executable, "-c", _SECOND_WRITER, location],
            capture_output=True,
            text=True,
            check=False,
        )
        assert second.returncode == 3, second.stderr
        assert f"another process (pid {os.getpid()})" in second.stdout
        # a second handle in this process shares the writer: same episodes, one lock
        other = self.open_dataset(location)
        other.add_episode(_bulk_episode(schema, 2, seed=0))
        assert writer.num_episodes == other.num_episodes == 1
        other.close()
        writer.close()
        # once the first writer is gone, a new one may write
        again = self.open_dataset(location)
        again.add_episode(_bulk_episode(schema, 2, seed=0))
        assert again.num_episodes == 2
        again.close()

    def test_create_over_existing_is_refused(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        Dataset.create(schema, location, backend=self.backend_cls.name).close()
        with pytest.raises(DatasetStateError, match="already holds a dataset"):
            Dataset.create(schema, location, backend=self.backend_cls.name)

    def test_read_only_refuses_writes(self, location: str | None, schema: DatasetSchema) -> None:
        Dataset.create(schema, location, backend=self.backend_cls.name).close()
        reader = self.open_dataset(location, read_only=True)
        with pytest.raises(DatasetStateError, match="read_only=True"):
            reader.add_episode(_bulk_episode(schema, 2, seed=0))
        reader.close()

    def test_kill_chain(self, location: str | None, schema: DatasetSchema) -> None:
        """A writer SIGKILLed 10 times in a row on one dataset loses nothing (``crash.py``)."""
        assert location is not None
        self._kill_chains(location, schema, seeds=chain_seeds([0]), kill_ops=4)

    @pytest.mark.slow
    def test_kill_chains_soak(self, tmp_path: Path, schema: DatasetSchema) -> None:
        """Six chains of 10 kills, writers running longer between kills."""
        seeds = chain_seeds(range(1, 7))
        self._kill_chains(str(tmp_path / "chain"), schema, seeds=seeds, kill_ops=12)

    def _kill_chains(
        self,
        base: str,
        schema: DatasetSchema,
        *,
        seeds: list[int],
        kill_ops: int,
    ) -> None:
        """Run one chain per seed (at ``<base>-<seed>``); print the figures; fail on a loss."""
        chains = []
        for seed in seeds:
            figures = run_kill_chain(
                self.backend_cls.name,
                f"{base}-{seed}",
                schema,
                seed=seed,
                kills=chain_kills(self.kill_chain_kills),
                kill_ops=kill_ops,
                all_or_none=self.add_episodes_all_or_none,
            )
            record(figures)
            chains.append(figures)
        failed = [f.summary() for f in chains if f.failure is not None]
        assert not failed, "\n".join(
            [*failed, f"replay a chain with {SEEDS_ENV}=<seed> and -k {self.backend_cls.name}"]
        )
        # a chain that wrote nothing would pass without testing anything
        assert sum(f.reported_finalized for f in chains) > 0, [f.summary() for f in chains]

    def test_verify_finds_a_flipped_byte(
        self, location: str | None, schema: DatasetSchema, tmp_path: Path
    ) -> None:
        if not callable(getattr(self.backend_cls, "verify", None)):
            pytest.skip(f"{self.backend_cls.__name__} has no verify()")
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        for seed in range(3):
            self._write(dataset, seed, 20)
        dataset.close()
        assert location is not None
        clean = self.open_dataset(location, read_only=True)
        assert clean.backend.verify() == []  # type: ignore[attr-defined]
        clean.close()
        files = [
            p
            for p in sorted(Path(location).rglob("*"))
            if p.is_file() and p.name not in ("manifest.json",) and not p.name.startswith(".")
        ]
        assert files
        for file in files:
            copy = tmp_path / f"damaged-{files.index(file)}"
            shutil.copytree(location, copy)
            damaged = copy / file.relative_to(location)
            data = bytearray(damaged.read_bytes())
            if not data:
                continue
            data[len(data) // 2] ^= 0xFF
            damaged.write_bytes(bytes(data))
            try:
                opened = self.open_dataset(str(copy), read_only=True)
            except EpisodataError as err:
                # refusing to open is a fine report, as long as it says where the damage is
                message = str(err)
                assert damaged.name in message or damaged.parent.name in message, message
                continue
            problems = opened.backend.verify()  # type: ignore[attr-defined]
            opened.close()
            assert problems, f"a flipped byte in {file.name} went unnoticed"


def _bulk_episode(schema: DatasetSchema, steps: int, seed: int) -> dict[str, Any]:
    return _bulk_from_rows(schema, example_rows(schema, steps + 1, seed=seed))


def _bulk_from_rows(
    schema: DatasetSchema, rows: Rows, *, terminated: bool = False, truncated: bool = False
) -> dict[str, Any]:
    """The bulk action-in dict whose storage rows are ``rows``."""
    by_role: dict[str, dict[str, Any]] = {"observation": {}, "action": {}, "reward": {}, "info": {}}
    for spec in schema:
        if spec.qualified_key in rows:
            by_role[spec.role][spec.key] = rows[spec.qualified_key]
    obs, info = by_role["observation"], by_role["info"]
    episode: dict[str, Any] = {
        "initial_observation": {k: v[0] for k, v in obs.items()},
        "observations": {k: v[1:] for k, v in obs.items()},
        "actions": {k: v[1:] for k, v in by_role["action"].items()},
        "rewards": {k: v[1:] for k, v in by_role["reward"].items()},
    }
    if info:
        episode["initial_info"] = {k: v[0] for k, v in info.items()}
        episode["infos"] = {k: v[1:] for k, v in info.items()}
    episode["terminated"], episode["truncated"] = terminated, truncated
    return episode


def _bulk_of(schema: DatasetSchema, episode: EpisodeRows) -> dict[str, Any]:
    return _bulk_from_rows(
        schema, episode.rows, terminated=episode.terminated, truncated=episode.truncated
    )


def _example_batch(schema: DatasetSchema) -> list[EpisodeRows]:
    """Complete episodes of assorted lengths (one without transitions), flags and fields."""
    cases = [(5, (), True, False), (1, (), False, False), (7, ("observation/depth",), False, True)]
    cases.append((4, (), True, True))
    return [
        EpisodeRows(example_rows(schema, n, seed=300 + n, absent=absent), terminated, truncated)
        for n, absent, terminated, truncated in cases
    ]


def _sibling(location: str | None, suffix: str) -> str | None:
    """A second dataset folder next to ``location`` (``None`` stays ``None``)."""
    return None if location is None else f"{location}-{suffix}"


def _files(location: str | None) -> dict[str, bytes]:
    """Every file of a dataset folder and its bytes (empty without a location)."""
    if location is None:
        return {}
    root = Path(location)
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _assert_same_table(actual: EpisodeTable, expected: EpisodeTable) -> None:
    for name in ("length", "terminated", "truncated", "ongoing"):
        np.testing.assert_array_equal(getattr(actual, name), getattr(expected, name), name)
    assert sorted(actual.present) == sorted(expected.present)
    for key, present in expected.present.items():
        np.testing.assert_array_equal(actual.present[key], present, key)


# A second writer: exits 3 with the refusal on stdout, or 0 if it got the lock.
_SECOND_WRITER = """
import sys
from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError

dataset = Dataset.open(sys.argv[1])
try:
    dataset._prepare_write()
except DatasetStateError as err:
    print(err)
    sys.exit(3)
"""
