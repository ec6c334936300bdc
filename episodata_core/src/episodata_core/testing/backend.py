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

from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.protocols import GatherRequest, StorageBackend
from episodata_core.registry import get_backend
from episodata_core.schema import DatasetSchema, FieldSpec

if TYPE_CHECKING:
    import numpy.typing as npt
    from pydantic import BaseModel

    from episodata_core.protocols import Rows

__all__ = ["BackendTests", "example_rows", "example_schema"]

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
        """Create a backend through its public classmethod."""
        opts: BaseModel = self.backend_cls.Options(**options)
        backend: B = self.backend_cls.create(schema, location, opts)
        return backend

    def reopen(self, backend: B, options: dict[str, Any]) -> B:
        """Close ``backend`` and open its location again (persistent backends only)."""
        self._require_persistence()
        location = getattr(backend, "location")  # noqa: B009 (not in the base Protocol)
        backend.close()
        opened: B = self.backend_cls.open(location, self.backend_cls.Options(**options))
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
