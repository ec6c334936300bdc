"""A writer's plan for steps whose values already are exactly right.

The generic step path (``split_step``, then ``coerce`` per field) accepts every spelling
and every safe cast and formats an error location, and that generality cost about 20 µs
per step. An environment loop hands over the same exact dtypes on every step, so a plan
compiled once per dataset and set of fields recognizes such steps and passes their
values on as they are: to a backend's ``append_step``, which assigns them into its
storage (building ``[1, ...]`` rows cost more than the rest of a memory step), or as the
rows the generic path would build. Whatever the plan does not recognize it answers with
``None``, and the writer runs the generic path, which alone validates and raises. The
plan is thus only an accelerator: it accepts a subset of what the generic path accepts,
and what it stores is bit for bit what the generic path stores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from episodata_core.normalize import flatten, step_key_spellings

if TYPE_CHECKING:
    from episodata_core.schema import DatasetSchema, Role

__all__ = ["StepPlan", "WriterPlans"]

# each role's canonical step key, in the order the generic path builds rows
_ROLE_KEYS: tuple[tuple[str, Role], ...] = (
    ("observations", "observation"),
    ("actions", "action"),
    ("rewards", "reward"),
    ("infos", "info"),
)
_SPELLINGS = step_key_spellings()
_CANONICAL_KEYS = frozenset(_SPELLINGS.values())

_Row = npt.NDArray[Any]
# the value itself when it is exact for the field, else None (no exact value is None)
_ExactOf = Callable[[Any], Any]
_RowOf = Callable[[Any], _Row]
_Prepared = tuple[dict[str, Any], Any, Any]


@lru_cache(maxsize=256)
def _exact_function(dtype: np.dtype[Any], shape: tuple[int, ...]) -> _ExactOf:
    """Whether a value of a field is exact: the value itself if so, else ``None``.

    The function returns ``None`` for every value it cannot vouch for, and the generic
    path then judges that value. Cached: the functions hold no state, and a writer per
    episode would otherwise build them anew for every episode.
    """
    if shape == ():
        return _exact_scalar(dtype)

    def exact_array(value: Any) -> Any:
        if type(value) is np.ndarray and value.shape == shape:
            given = value.dtype
            if given is dtype or given == dtype:
                return value
        return None

    return exact_array


def _exact_scalar(dtype: np.dtype[Any]) -> _ExactOf:
    """The exactness check of a scalar field.

    It takes 0-d arrays and NumPy scalars of the field's dtype, and the Python bools,
    ints and floats for which ``coerce`` finds no problem and for which both
    ``np.array(value, dtype)`` and assigning the value into an array of the dtype give
    the bits of coerce's ``np.asarray(value).astype``.
    """

    def exact_numpy(value: Any) -> Any:
        if type(value) is np.ndarray:
            return value if value.shape == () and value.dtype == dtype else None
        if isinstance(value, np.generic) and value.dtype == dtype:
            return value
        return None

    kind = dtype.kind
    if kind == "f":
        # coerce rejects finite floats above the field's largest value
        largest = float(np.finfo(dtype).max) if dtype.itemsize <= 8 else math.inf
        # integers up to 2**(nmant + 1) are exact in the field's dtype and in float64, so
        # coerce's cast from int64 and this one from the Python int agree
        exact = 2 ** min(np.finfo(dtype).nmant + 1, 53)

        def exact_float(value: Any) -> Any:
            kind = type(value)
            if (
                (kind is float and not (abs(value) > largest and math.isfinite(value)))
                or (kind is int and -exact <= value <= exact)
                or kind is bool
            ):
                return value
            return exact_numpy(value)

        return exact_float
    if kind in "iu":
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)

        def exact_integer(value: Any) -> Any:
            # Python floats are left to coerce's whole-number and finiteness checks
            kind = type(value)
            if (kind is int and low <= value <= high) or kind is bool:
                return value
            return exact_numpy(value)

        return exact_integer
    if kind == "b":

        def exact_bool(value: Any) -> Any:
            kind = type(value)
            if kind is bool or (kind is int and value in (0, 1)):
                return value
            return exact_numpy(value)

        return exact_bool
    return exact_numpy


@lru_cache(maxsize=256)
def _row_function(dtype: np.dtype[Any], shape: tuple[int, ...]) -> _RowOf:
    """How an exact value of a field becomes the ``[1, *shape]`` row coerce would give."""
    if shape == ():

        def scalar_row(value: Any) -> _Row:
            if type(value) is np.ndarray:
                return value[None]
            return np.array(value, dtype=dtype, ndmin=1)

        return scalar_row

    def array_row(value: Any) -> _Row:
        # coerce returns such an array itself: hand on the same view, as the generic
        # path does; backends copy rows into storage of their own
        row: _Row = value[None]
        return row

    return array_row


class _RolePlan:
    """The fields of one role that the episode holds, by the key a step gives them under."""

    __slots__ = ("bare_exact", "bare_key", "fields", "role")

    def __init__(self, role: Role, fields: dict[str, tuple[str, _ExactOf]]) -> None:
        self.role = role
        self.fields = fields
        # a value that is not a mapping stands for the field keyed by the role itself
        bare = fields.get(role) if len(fields) == 1 else None
        self.bare_key = "" if bare is None else bare[0]
        self.bare_exact = None if bare is None else bare[1]

    def add_values(self, value: Any, values: dict[str, Any]) -> bool:
        """Add the exact values of ``value`` to ``values``; False when the generic path must judge.

        ``None`` stands for a role the step does not give: fine only when the episode
        holds none of its fields.
        """
        if value is None:
            return not self.fields
        exact_of = self.bare_exact
        if exact_of is not None:
            exact = exact_of(value)
            if exact is not None:
                values[self.bare_key] = exact
                return True
        # the mapping check comes last: isinstance against the Mapping ABC is slow, and
        # no value an exactness check accepts is a mapping
        if type(value) is not dict and not isinstance(value, Mapping):
            return False
        flat = flatten(value, self.role)
        fields = self.fields
        if flat.keys() != fields.keys():
            return False
        for key, item in flat.items():
            qualified_key, exact_of = fields[key]
            exact = exact_of(item)
            if exact is None:
                return False
            values[qualified_key] = exact
        return True


class StepPlan:
    """Exact values of one step for a writer whose episode holds the fields ``present``.

    :meth:`prepare` returns ``None`` for every step it does not recognize as exact; the
    caller then takes the generic path, which validates the step and raises. Its
    ``values`` go to a backend's ``append_step`` as they are, or become the rows the
    generic path would build through :meth:`rows`.
    """

    __slots__ = ("_empty", "_held", "_hidden", "_reset", "_roles", "_row_of", "present")

    def __init__(self, schema: DatasetSchema, present: frozenset[str]) -> None:
        self.present = present
        roles = []
        for canonical, role in _ROLE_KEYS:
            fields = {
                spec.key: (spec.qualified_key, _exact_function(spec.np_dtype, spec.shape))
                for spec in schema.by_role(role)
                if spec.qualified_key in present
            }
            plan = _RolePlan(role, fields)
            roles.append((canonical, plan.bare_key, plan.bare_exact, plan))
        self._roles = tuple(roles)
        self._row_of = {
            spec.qualified_key: _row_function(spec.np_dtype, spec.shape)
            for spec in schema
            if spec.qualified_key in present
        }
        plans = {role: entry[3] for entry, (_, role) in zip(roles, _ROLE_KEYS, strict=True)}
        self._reset = (plans["observation"], plans["info"])
        # a step pays for the roles the episode holds; the others only need to be absent
        self._held = tuple(entry for entry in roles if entry[3].fields)
        self._empty = tuple((entry[0], entry[3]) for entry in roles if not entry[3].fields)
        # row 0 of every action and reward field: no action led to the reset observation
        self._hidden = tuple(
            (spec.qualified_key, (1, *spec.shape), spec.np_dtype)
            for spec in schema
            if spec.role in ("action", "reward")
        )

    def prepare(self, step: Any) -> _Prepared | None:
        """``(values, terminated, truncated)`` with the flags as given, or ``None``.

        ``values`` maps each field the episode holds to its exact value: an array of
        the field's dtype and shape, a NumPy scalar or 0-d array of its dtype, or a
        Python scalar that NumPy stores in the dtype with coerce's bits.
        """
        if type(step) is not dict:
            return None
        data: Mapping[str, Any] = step
        if not step.keys() <= _CANONICAL_KEYS:
            # other spellings ('obs', 'action', ...): rename, unless a key is unknown or
            # given twice, which the generic path reports
            renamed: dict[str, Any] = {}
            for key, value in step.items():
                canonical = _SPELLINGS.get(key)
                if canonical is None or canonical in renamed:
                    return None
                renamed[canonical] = value
            data = renamed
        if data.get("observations") is None:
            return None
        values: dict[str, Any] = {}
        for canonical, bare_key, bare_exact, plan in self._held:
            value = data.get(canonical)
            # the bare field inline: the common step pays no method call per role
            if bare_exact is not None and (exact := bare_exact(value)) is not None:
                values[bare_key] = exact
            elif not plan.add_values(value, values):
                return None
        for canonical, plan in self._empty:
            value = data.get(canonical)
            if value is not None and not plan.add_values(value, values):
                return None
        return values, data.get("terminated", False), data.get("truncated", False)

    def rows(self, values: Mapping[str, Any]) -> dict[str, _Row]:
        """The ``[1, *shape]`` rows of exact ``values``: those the generic path builds."""
        row_of = self._row_of
        return {key: row_of[key](value) for key, value in values.items()}

    def reset_rows(self, observation: Any, infos: Any) -> dict[str, _Row] | None:
        """Row 0 of a new episode whose reset gives exactly this plan's fields, or ``None``.

        ``infos`` is ``None`` when the reset gives none. A reset the plan accepts gives
        the observation and info fields of ``present`` and no others, so the generic
        path (``writers._reset_rows``) would derive this very ``present`` from it and
        build these very rows; every other reset is left to it.
        """
        if observation is None:
            return None
        values: dict[str, Any] = {}
        observations, infos_plan = self._reset
        if not (
            observations.add_values(observation, values) and infos_plan.add_values(infos, values)
        ):
            return None
        rows = self.rows(values)
        for key, shape, dtype in self._hidden:
            rows[key] = np.zeros(shape, dtype=dtype)
        return rows

    def exact(self, data: Mapping[str, Any], keys: Collection[str]) -> bool:
        """Whether the roles under canonical ``keys`` of ``data`` are exact as they are.

        For values checked ahead of the step that writes them (action-out recording).
        """
        values: dict[str, Any] = {}
        return all(
            plan.add_values(data.get(canonical), values)
            for canonical, *_, plan in self._roles
            if canonical in keys
        )


class WriterPlans:
    """The step plans of one dataset's writers, by the fields their episodes hold.

    Compiling a plan costs about as much as recording a dozen steps; a writer per
    episode would pay it for every episode, although the episodes of one recording
    almost always hold the same fields. ``last`` is the plan handed out last: the one
    the next reset most likely matches.
    """

    __slots__ = ("_by_present", "last")

    def __init__(self) -> None:
        self._by_present: dict[frozenset[str], StepPlan] = {}
        self.last: StepPlan | None = None

    def get(self, schema: DatasetSchema, present: frozenset[str]) -> StepPlan:
        """The plan of episodes of ``schema`` that hold the fields ``present``."""
        plan = self._by_present.get(present)
        if plan is None:
            plan = self._by_present[present] = StepPlan(schema, present)
        self.last = plan
        return plan
