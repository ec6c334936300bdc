"""``BackendTests``: the conformance tests every storage backend passes.

A backend's test module subclasses it and fills in the class attribute and fixture::

    class TestMyBackend(BackendTests[MyBackend]):
        backend_cls = MyBackend

        @pytest.fixture
        def location(self, tmp_path: Path) -> str | None:
            return str(tmp_path / "dataset")

The expected values in these tests come from the episodes the tests themselves build
(kept as plain arrays, :mod:`episodata_core.testing.examples`), never from the backend
under test. Backends that store datasets at a location subclass
:class:`~episodata_core.testing.persistent.PersistentBackendTests` instead.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from episodata_core.dataset import Dataset
from episodata_core.errors import SchemaError
from episodata_core.protocols import (
    GatherRequest,
    StorageBackend,
    SupportsAddEpisodes,
    SupportsPersistence,
    SupportsReadFields,
    SupportsVerify,
    supports_persistence,
)
from episodata_core.selection import Selection
from episodata_core.testing.examples import (
    assert_same_table,
    bulk_from_rows,
    bulk_of,
    dataset_files,
    example_batch,
    example_rows,
    example_schema,
    reference_gather,
    scribble,
    sibling,
)
from episodata_core.testing.packaging import PackagingTests
from episodata_core.testing.strategies import episodes, schemas

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.protocols import Rows
    from episodata_core.registry import PluginKind
    from episodata_core.schema import DatasetSchema

__all__ = ["B", "BackendTests"]

B = TypeVar("B", bound=StorageBackend)

_GENERATED = itertools.count()  # sibling folders of the generated round trips


class BackendTests(PackagingTests, Generic[B]):
    """Conformance tests for a :class:`~episodata_core.protocols.StorageBackend`.

    The packaging tests (:class:`~episodata_core.testing.packaging.PackagingTests`) come
    with it: the ``episodata.backends`` entry point is discoverable, names the class
    and its module imports nothing heavy.
    """

    plugin_kind: ClassVar[PluginKind] = "backend"
    backend_cls: type[B]
    """The backend class under test (set it in the subclass's body)."""
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
        return self.backend_cls.create(schema, location, self.backend_cls.Options(**options))

    def reopen(self, backend: B, options: dict[str, Any]) -> B:
        """Close ``backend`` and open its location again (persistent backends only)."""
        persistent = self._require_persistence(backend)
        location = persistent.location
        backend.close()
        opened = type(persistent).open(
            location, self.backend_cls.Options(**options), writable=False
        )
        return cast("B", opened)

    @property
    def plugin_cls(self) -> type:
        """The class the packaging tests check: :attr:`backend_cls`."""
        return self.backend_cls

    # -- ability checks: skip the test, or return the backend typed by its ability ---------

    def _require_persistence(self, backend: B) -> SupportsPersistence:
        # SupportsPersistence has a classmethod and a property, which isinstance() cannot
        # check structurally; supports_persistence() looks for the callables
        if not supports_persistence(backend):
            pytest.skip(f"{self.backend_cls.__name__} does not store datasets at a location")
        return cast("SupportsPersistence", backend)

    def _require_add_episodes(self, backend: object) -> SupportsAddEpisodes:
        if not isinstance(backend, SupportsAddEpisodes):
            pytest.skip(f"{self.backend_cls.__name__} has no add_episodes (the core loops)")
        return backend

    def _require_read_fields(self, backend: object) -> SupportsReadFields:
        if not isinstance(backend, SupportsReadFields):
            pytest.skip(f"{self.backend_cls.__name__} has no read_fields (the core gathers)")
        return backend

    def _require_verify(self, backend: object) -> SupportsVerify:
        if not isinstance(backend, SupportsVerify):
            pytest.skip(f"{self.backend_cls.__name__} has no verify()")
        return backend

    def read_all(self, backend: StorageBackend, episode: int) -> dict[str, npt.NDArray[Any]]:
        """Every present field of one episode, through ``read_rows``."""
        table = backend.episode_table()
        fields = [
            key
            for key in backend.schema.qualified_keys
            if key not in table.present or table.present[key][episode]
        ]
        rows = backend.read_rows(episode, 0, int(table.length[episode]) + 1, fields)
        return {key: np.array(value) for key, value in rows.items()}

    def assert_episode(self, backend: StorageBackend, episode: int, expected: Rows) -> None:
        """The stored rows of ``episode`` equal ``expected``, field by field."""
        stored = self.read_all(backend, episode)
        assert sorted(stored) == sorted(expected)
        for key, values in expected.items():
            assert stored[key].dtype == values.dtype, key
            np.testing.assert_array_equal(stored[key], values, err_msg=key)

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

    def test_read_fields_returns_each_selection_in_order(
        self, backend: B, schema: DatasetSchema
    ) -> None:
        reader = self._require_read_fields(backend)
        episodes = self._fill(backend, schema)
        # unequal lengths, a repeated episode, the ongoing one, an empty range, the end
        picks = [(2, 5, 20), (0, 0, 3), (5, 1, 7), (2, 0, 1), (4, 2, 2), (0, 11, 12)]
        selections = [Selection(e, a, b) for e, a, b in picks]
        # flat keys where unique, role/key for the key two roles share, in a given order
        keys = ["keyboard/jump", "observation/camera", "state", "action/camera", "reward"]
        qualified = {"keyboard/jump": "action/keyboard/jump", "state": "observation/state"}
        qualified["reward"] = "reward/reward"
        out = reader.read_fields(keys, selections)
        assert len(out) == len(selections)
        for got, (episode, start, stop) in zip(out, picks, strict=True):
            assert list(got) == keys
            for key in keys:
                expected = episodes[episode][qualified.get(key, key)][start:stop]
                assert got[key].dtype == expected.dtype, key
                np.testing.assert_array_equal(got[key], expected, err_msg=key)
        assert reader.read_fields(keys, []) == []

    def test_read_fields_refuses_absent_fields_and_ranges(
        self, backend: B, schema: DatasetSchema
    ) -> None:
        reader = self._require_read_fields(backend)
        self._fill(backend, schema)  # episode 1 stores no depth
        depth = reader.read_fields(["depth"], [Selection(0, 0, 4)])
        assert depth[0]["depth"].shape == (4, 4)
        with pytest.raises(KeyError, match=r"'depth' is absent from episode 1"):
            reader.read_fields(["depth"], [Selection(0, 0, 4), Selection(1, 0, 2)])
        with pytest.raises(KeyError, match=r"unknown field 'sonar'"):
            reader.read_fields(["sonar"], [Selection(0, 0, 1)])
        with pytest.raises(KeyError, match=r"'camera' is in roles 'observation' and 'action'"):
            reader.read_fields(["camera"], [Selection(0, 0, 1)])
        with pytest.raises(IndexError, match=r"episode 1, which has 3 rows"):
            reader.read_fields(["state"], [Selection(1, 0, 4)])
        with pytest.raises(IndexError, match=r"episode 9 does not exist"):
            reader.read_fields(["state"], [Selection(9, 0, 1)])

    def test_episode_length_counts_stored_rows(self, backend: B, schema: DatasetSchema) -> None:
        reader = self._require_read_fields(backend)
        episodes = self._fill(backend, schema)
        for episode, rows in episodes.items():
            # rows, T + 1: the reset row and one per step, ongoing episodes too
            assert reader.episode_length(episode) == len(rows["observation/state"])
        with pytest.raises(IndexError, match="episode 6 does not exist"):
            reader.episode_length(6)

    @settings(
        max_examples=8,
        deadline=None,
        database=None,
        # one location fixture for every example: each example writes a sibling folder;
        # each backend's subclass runs this one method (no database, so no replay mix-up)
        # and drawing a schema with image-sized fields is slow on a loaded machine
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
            HealthCheck.too_slow,
        ],
    )
    @given(data=st.data())
    def test_generated_episodes_round_trip(
        self, data: st.DataObject, location: str | None, options: dict[str, Any]
    ) -> None:
        """Any schema, any episodes (strategies.py): what is written is what is read."""
        schema = data.draw(schemas(), label="schema")
        written = data.draw(st.lists(episodes(schema), min_size=1, max_size=3), label="episodes")
        folder = sibling(location, f"generated-{next(_GENERATED)}")
        backend = self.create(schema, folder, options)
        try:
            ids = [
                backend.add_episode(e.rows, terminated=e.terminated, truncated=e.truncated)
                for e in written
            ]
            assert ids == list(range(len(written)))
            table = backend.episode_table()
            assert table.length.tolist() == [len(next(iter(e.rows.values()))) - 1 for e in written]
            assert table.terminated.tolist() == [e.terminated for e in written]
            assert table.truncated.tolist() == [e.truncated for e in written]
            for key, present in table.present.items():
                assert present.tolist() == [key in e.rows for e in written], key
            for episode, e in zip(ids, written, strict=True):
                self.assert_episode(backend, episode, e.rows)
        finally:
            backend.close()

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
            expected = reference_gather(episodes, request, key)
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
                scribble(array)
            else:
                with pytest.raises(ValueError, match="read-only"):
                    array[...] = 0
        for episode, rows in expected.items():
            self.assert_episode(backend, episode, rows)

    # -- batch writes ---------------------------------------------------------------------

    def test_add_episodes_equals_a_loop(
        self, backend: B, schema: DatasetSchema, location: str | None, options: dict[str, Any]
    ) -> None:
        batch_backend = self._require_add_episodes(backend)
        ongoing = example_rows(schema, 3, seed=299)
        backend.start_episode(ongoing)  # ids continue after an ongoing episode
        assert batch_backend.add_episodes([]) == []
        batch = example_batch(schema)
        ids = batch_backend.add_episodes(batch)
        loop = self.create(schema, sibling(location, "loop"), options)
        loop.start_episode(ongoing)
        looped = [
            loop.add_episode(e.rows, terminated=e.terminated, truncated=e.truncated) for e in batch
        ]
        assert ids == looped == [1, 2, 3, 4]
        assert_same_table(backend.episode_table(), loop.episode_table())
        self.assert_episode(backend, 0, ongoing)
        for episode, e in zip(ids, batch, strict=True):
            self.assert_episode(backend, episode, e.rows)
        loop.close()

    def test_dataset_add_episodes_equals_a_loop(
        self, schema: DatasetSchema, location: str | None, options: dict[str, Any]
    ) -> None:
        name = self.backend_cls.name
        batch = example_batch(schema)
        dataset = Dataset.create(schema, location, backend=name, **options)
        loop = Dataset.create(schema, sibling(location, "loop"), backend=name, **options)
        for target in (dataset, loop):
            target.add_episode(bulk_from_rows(schema, example_rows(schema, 2, seed=298)))
        # a generator: add_episodes takes any iterable, once
        ids = dataset.add_episodes(bulk_of(schema, e) for e in batch)
        looped = [loop.add_episode(bulk_of(schema, e)) for e in batch]
        assert ids == looped == [1, 2, 3, 4]
        assert dataset.add_episodes(iter([])) == []
        assert_same_table(dataset.backend.episode_table(), loop.backend.episode_table())
        for episode, e in zip(ids, batch, strict=True):
            self.assert_episode(dataset.backend, episode, e.rows)
        dataset.close()
        loop.close()

    def test_dataset_add_episodes_bad_input_changes_nothing(
        self, schema: DatasetSchema, location: str | None, options: dict[str, Any]
    ) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name, **options)
        dataset.add_episode(bulk_from_rows(schema, example_rows(schema, 3, seed=297)))
        before = dataset_files(location)
        good = [bulk_of(schema, e) for e in example_batch(schema)]
        bad = bulk_from_rows(schema, example_rows(schema, 4, seed=296))
        bad["actions"]["camera"] = np.zeros((3, 3), dtype=np.float32)
        with pytest.raises(SchemaError, match=r"episode 2 \(item 1 of add_episodes\).*'camera'"):
            dataset.add_episodes([good[0], bad, good[1]])
        with pytest.raises(SchemaError, match="got one dict"):
            dataset.add_episodes(good[0])  # type: ignore[arg-type]
        assert dataset.num_episodes == 1
        assert dataset_files(location) == before
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
