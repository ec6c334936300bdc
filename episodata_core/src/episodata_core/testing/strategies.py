"""Hypothesis strategies for schemas and episodes, for property tests of plugins.

``schemas()`` draws a :class:`~episodata_core.schema.DatasetSchema` with fields of every
role (nested keys, several dtypes and per-step shapes, optional observations);
``episodes(schema)`` draws one complete episode of it as the storage rows a backend
receives (:class:`~episodata_core.protocols.EpisodeRows`, ``[T + 1, ...]`` per field).
Useful properties: a write followed by a read returns the same rows; ids count up; an
absent optional field stays absent. Needs Hypothesis (``pip install
"episodata-core[testing]"``).

Examples
--------
>>> from hypothesis import given
>>> from episodata_core.testing.strategies import episodes, schemas
>>> @given(schemas().flatmap(lambda s: episodes(s).map(lambda e: (s, e))))
... def test_round_trip(case): ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from episodata_core.protocols import EpisodeRows
from episodata_core.schema import DatasetSchema, FieldSpec

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.schema import Role

__all__ = ["DTYPES", "episodes", "field_values", "schemas"]

DTYPES = ("float32", "float64", "int64", "int32", "uint8", "bool")
"""The dtypes :func:`schemas` draws from (every backend stores them)."""

# no key is the group of another ('pos' beside 'pos/x' is not allowed), so any subset works
_KEYS: dict[Role, tuple[str, ...]] = {
    "observation": ("state", "camera", "pos/x", "pos/y", "depth"),
    "action": ("action", "camera", "keyboard/jump"),
    "reward": ("reward", "bonus"),
    "info": ("step_idx", "debug/t"),
}
_MIN_FIELDS: dict[Role, int] = {"observation": 1, "action": 0, "reward": 0, "info": 0}


@st.composite
def _field(draw: st.DrawFn, role: Role, key: str) -> FieldSpec:
    shape = draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
    dtype = draw(st.sampled_from(DTYPES))
    # only observations are optional: an episode's actions and rewards are all present
    optional = role == "observation" and key != "state" and draw(st.booleans())
    return FieldSpec(key, shape=shape, dtype=dtype, role=role, optional=optional)


def schemas(*, max_fields_per_role: int = 3) -> st.SearchStrategy[DatasetSchema]:
    """Schemas with 1 to ``max_fields_per_role`` observations and up to as many of each other role."""
    return _schemas(max_fields_per_role)


@st.composite
def _schemas(draw: st.DrawFn, max_fields_per_role: int) -> DatasetSchema:
    fields: list[FieldSpec] = []
    for role, pool in _KEYS.items():
        keys = draw(
            st.lists(
                st.sampled_from(pool),
                min_size=_MIN_FIELDS[role],
                max_size=min(max_fields_per_role, len(pool)),
                unique=True,
            )
        )
        fields += [draw(_field(role, key)) for key in keys]
    return DatasetSchema(fields)


def field_values(spec: FieldSpec, num_rows: int) -> st.SearchStrategy[npt.NDArray[Any]]:
    """``[num_rows, *spec.shape]`` arrays of ``spec``'s dtype (finite floats)."""
    dtype = spec.np_dtype
    elements: st.SearchStrategy[Any] | None = None
    if dtype.kind == "f":
        width: Literal[32, 64] = 32 if dtype.itemsize == 4 else 64
        elements = st.floats(-1e6, 1e6, width=width, allow_nan=False)
    return hnp.arrays(dtype, (num_rows, *spec.shape), elements=elements)


def episodes(schema: DatasetSchema, *, max_steps: int = 8) -> st.SearchStrategy[EpisodeRows]:
    """Complete episodes of ``schema``: 0 to ``max_steps`` transitions, random flags.

    Each is the ``[T + 1, ...]`` storage rows of every field; row 0 is the reset row,
    whose action and reward rows are zero, as the writers store them. Each optional
    field is present or absent for the whole episode, and at least one field is present.
    """
    return _episodes(schema, max_steps)


@st.composite
def _episodes(draw: st.DrawFn, schema: DatasetSchema, max_steps: int) -> EpisodeRows:
    num_rows = draw(st.integers(0, max_steps)) + 1
    rows: dict[str, npt.NDArray[Any]] = {}
    specs = list(schema)
    # every optional field may be absent, but not all of them at once: an episode's rows
    # need at least one field (the core refuses an episode without any before a backend
    # sees it), so the first field is kept when nothing else was drawn
    present = [not spec.optional or draw(st.booleans()) for spec in specs]
    if not any(present):
        present[0] = True
    for spec, keep in zip(specs, present, strict=True):
        if not keep:
            continue
        values = draw(field_values(spec, num_rows))
        if spec.role in ("action", "reward"):
            values[:1] = 0
        rows[spec.qualified_key] = values
    terminated, truncated = draw(st.booleans()), draw(st.booleans())
    return EpisodeRows(rows, terminated, truncated)
