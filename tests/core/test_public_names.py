"""One owner for the public names, the declared backend contract, and argument errors."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import episodata
import episodata_core
from episodata import ArgumentError, Dataset, DatasetSchema, EpisodataError, FieldSpec, SchemaError
from episodata_core import registry
from episodata_core.protocols import OPTIONAL_FLAGS, StorageBackend, supports_persistence
from episodata_core.views import ALIASES, TransitionView

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(2,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
    ]
)


def _dataset() -> Dataset:
    dataset = Dataset.create(SCHEMA)
    dataset.add_episode(
        {
            "initial_observation": {"state": np.zeros(2, np.float32)},
            "observations": {"state": np.ones((5, 2), np.float32)},
            "actions": np.arange(5),
            "terminated": True,
        }
    )
    return dataset


def test_the_facade_exports_the_core_list_and_the_lazy_table():
    from episodata._names import LAZY

    assert episodata.__all__ == [*episodata_core.__all__, *LAZY]
    assert len(set(episodata.__all__)) == len(episodata.__all__)
    for name in episodata_core.__all__:
        assert getattr(episodata, name) is getattr(episodata_core, name), name
    # the facade defines no public name itself: only __all__ and the lazy lookup
    source = Path(episodata.__file__).read_text()
    defined = {
        target.id if isinstance(node, ast.Assign) else node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign | ast.FunctionDef)
        for target in (node.targets if isinstance(node, ast.Assign) else [node])
        if isinstance(target, ast.Name | ast.FunctionDef)
    }
    assert defined == {"__all__", "__getattr__", "__dir__"}


def test_every_alias_is_the_identical_role_view():
    # the oracle is the alias spelling itself: observations, next_observation, ...
    assert set(ALIASES) == {
        "observation",
        "observations",
        "next_observation",
        "next_observations",
        "all_observations",
        "actions",
        "rewards",
        "infos",
        "next_infos",
    }
    assert ALIASES["next_observations"] == "next_obs"
    batch = _dataset().segment_stream(3, batch_size=2, seed=0).sample()
    for alias, target in ALIASES.items():
        if target in ("info", "next_info", "reward"):
            continue  # the schema has no info or reward fields
        assert getattr(batch, alias) is getattr(batch, target), alias
        assert isinstance(vars(TransitionView)[alias], property)


@pytest.mark.parametrize(
    "call",
    [
        lambda ds: ds.segment_stream(3, batch_size=0),
        lambda ds: ds.segments(3, pad="middle"),
        lambda ds: ds.segments(3, context_length=2),
        lambda ds: ds.sample_transitions(-1),
        lambda ds: ds.segment_stream(3, rank=2, world_size=2),
        lambda ds: ds.add_episodes({"observations": {}}),
        lambda ds: ds.new_vector_episodes(np.zeros((2, 2)), autoreset_mode="later"),
    ],
)
def test_argument_errors_are_their_own_class_and_still_schema_errors(call):
    dataset = _dataset()
    num_episodes = dataset.num_episodes
    with pytest.raises(ArgumentError) as raised:
        call(dataset)
    # code that caught SchemaError (or ValueError) for these keeps working
    assert isinstance(raised.value, SchemaError)
    assert isinstance(raised.value, EpisodataError)
    assert isinstance(raised.value, ValueError)
    assert dataset.num_episodes == num_episodes


def test_a_bad_schema_argument_names_the_argument():
    with pytest.raises(ArgumentError, match=r"schema: expected a DatasetSchema, got dict"):
        Dataset.create({"state": 1})  # type: ignore[arg-type]


def test_persistence_and_flags_are_read_from_the_declared_contract(tmp_path):
    memory = registry.get_backend("memory")
    zarr = registry.get_backend("zarr")
    npz = registry.get_backend("npz_directory")
    assert not supports_persistence(memory)
    assert supports_persistence(zarr)
    assert supports_persistence(npz)
    assert {memory.default_prefetch, zarr.default_prefetch, npz.default_prefetch} == {0, 2}
    assert "default_prefetch" in StorageBackend.__annotations__
    assert set(OPTIONAL_FLAGS) == {"default_prefetch"}
    stored = Dataset.create(SCHEMA, tmp_path / "ds", backend="npz_directory")
    assert stored.location == str(tmp_path / "ds")
    assert _dataset().location is None


def test_the_access_object_is_what_writers_and_streams_share(tmp_path):
    # a handle that joins this process's writer rebinds its access object in place: a
    # stream made before the join reads the writer's backend afterwards
    stored = Dataset.create(SCHEMA, tmp_path / "ds", backend="npz_directory")
    stored.close()
    reader = Dataset.open(tmp_path / "ds")
    access = reader.access
    before = access.backend
    writer = reader.new_episode({"state": np.zeros(2, np.float32)})
    assert reader.access is access
    assert access.backend is not before
    writer.add_step({"observations": {"state": np.ones(2, np.float32)}, "actions": 3})
    writer.end(terminated=True)
    stream = reader.segment_stream(1, batch_size=4, seed=0, prefetch=0)
    assert stream.index.access is access
    assert np.array_equal(stream.sample().action, np.full((4, 1), 3))
    assert len(access.snapshot()) == 1
    reader.close()
