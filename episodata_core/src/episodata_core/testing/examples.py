"""Example schema, rows and episodes the conformance tests write, and their oracles.

The expected values of the kit's tests come from these plain arrays, never from the
backend under test. :func:`example_schema` and :func:`example_rows` are public: a
plugin's own tests use them too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.protocols import EpisodeRows
from episodata_core.schema import DatasetSchema, FieldSpec

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.protocols import EpisodeTable, GatherRequest, Rows

__all__ = [
    "assert_same_table",
    "bulk_episode",
    "bulk_from_rows",
    "bulk_of",
    "dataset_files",
    "example_batch",
    "example_rows",
    "example_schema",
    "reference_gather",
    "scribble",
    "sibling",
]


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


def scribble(array: npt.NDArray[Any]) -> None:
    """Change every element of ``array`` in place."""
    if array.dtype.kind == "b":
        np.logical_not(array, out=array)
    else:
        np.add(array, 1, out=array, casting="unsafe")


def reference_gather(
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


def bulk_episode(schema: DatasetSchema, steps: int, seed: int) -> dict[str, Any]:
    """A bulk action-in episode dict of ``steps`` transitions (rows of :func:`example_rows`)."""
    return bulk_from_rows(schema, example_rows(schema, steps + 1, seed=seed))


def bulk_from_rows(
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


def bulk_of(schema: DatasetSchema, episode: EpisodeRows) -> dict[str, Any]:
    """The bulk action-in dict of ``episode``, flags included."""
    return bulk_from_rows(
        schema, episode.rows, terminated=episode.terminated, truncated=episode.truncated
    )


def example_batch(schema: DatasetSchema) -> list[EpisodeRows]:
    """Complete episodes of assorted lengths (one without transitions), flags and fields."""
    cases = [(5, (), True, False), (1, (), False, False), (7, ("observation/depth",), False, True)]
    cases.append((4, (), True, True))
    return [
        EpisodeRows(example_rows(schema, n, seed=300 + n, absent=absent), terminated, truncated)
        for n, absent, terminated, truncated in cases
    ]


def sibling(location: str | None, suffix: str) -> str | None:
    """A second dataset folder next to ``location`` (``None`` stays ``None``)."""
    return None if location is None else f"{location}-{suffix}"


def dataset_files(location: str | None) -> dict[str, bytes]:
    """Every file of a dataset folder and its bytes (empty without a location)."""
    if location is None:
        return {}
    root = Path(location)
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def assert_same_table(actual: EpisodeTable, expected: EpisodeTable) -> None:
    """Lengths, flags and presence of two episode tables are equal."""
    for name in ("length", "terminated", "truncated", "ongoing"):
        np.testing.assert_array_equal(getattr(actual, name), getattr(expected, name), name)
    assert sorted(actual.present) == sorted(expected.present)
    for key, present in expected.present.items():
        np.testing.assert_array_equal(actual.present[key], present, key)
