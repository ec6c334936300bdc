"""A writer's plan for steps whose values already are exactly right.

The generic step path (``split_step``, then ``coerce`` per field) accepts every spelling
and every safe cast and formats an error location, and that generality cost about 20 µs
per step. An environment loop hands over the same exact dtypes on every step, so a plan
compiled once per writer recognizes such steps and builds their rows directly. Whatever
the plan does not recognize it answers with ``None``, and the writer runs the generic
path, which alone validates and raises. The plan is thus only an accelerator: it accepts
a subset of what the generic path accepts, and builds the very rows the generic path
would build.
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
_RowOf = Callable[[Any], "_Row | None"]
_Prepared = tuple[dict[str, _Row], Any, Any]


@lru_cache(maxsize=256)
def _row_function(dtype: np.dtype[Any], shape: tuple[int, ...]) -> _RowOf:
    """How an exact value of a field becomes its ``[1, *shape]`` row.

    The function returns ``None`` for every value it cannot vouch for, and the generic
    path then judges that value. Cached: the functions hold no state, and a writer per
    episode would otherwise build them anew for every episode.
    """
    if shape == ():
        return _scalar_row(dtype)

    def array_row(value: Any) -> _Row | None:
        if type(value) is np.ndarray and value.shape == shape:
            given = value.dtype
            if given is dtype or given == dtype:
                # coerce returns such an array itself: hand on the same view, as the
                # generic path does; backends copy rows into storage of their own
                return value[None]
        return None

    return array_row


def _scalar_row(dtype: np.dtype[Any]) -> _RowOf:
    """The row function of a scalar field.

    It takes 0-d arrays and NumPy scalars of the field's dtype, and the Python bools,
    ints and floats for which ``coerce`` finds no problem and for which
    ``np.array(value, dtype)`` gives the bits of coerce's ``np.asarray(value).astype``.
    """

    def numpy_row(value: Any) -> _Row | None:
        if type(value) is np.ndarray:
            if value.shape == () and value.dtype == dtype:
                return value[None]
            return None
        if isinstance(value, np.generic) and value.dtype == dtype:
            return np.array(value, dtype=dtype, ndmin=1)
        return None

    kind = dtype.kind
    if kind == "f":
        # coerce rejects finite floats above the field's largest value
        largest = float(np.finfo(dtype).max) if dtype.itemsize <= 8 else math.inf
        # integers up to 2**(nmant + 1) are exact in the field's dtype and in float64, so
        # coerce's cast from int64 and this one from the Python int agree
        exact = 2 ** min(np.finfo(dtype).nmant + 1, 53)

        def float_row(value: Any) -> _Row | None:
            kind = type(value)
            if (
                (kind is float and not (abs(value) > largest and math.isfinite(value)))
                or (kind is int and -exact <= value <= exact)
                or kind is bool
            ):
                return np.array(value, dtype=dtype, ndmin=1)
            return numpy_row(value)

        return float_row
    if kind in "iu":
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)

        def integer_row(value: Any) -> _Row | None:
            # Python floats are left to coerce's whole-number and finiteness checks
            kind = type(value)
            if (kind is int and low <= value <= high) or kind is bool:
                return np.array(value, dtype=dtype, ndmin=1)
            return numpy_row(value)

        return integer_row
    if kind == "b":

        def bool_row(value: Any) -> _Row | None:
            kind = type(value)
            if kind is bool or (kind is int and value in (0, 1)):
                return np.array(value, dtype=dtype, ndmin=1)
            return numpy_row(value)

        return bool_row
    return numpy_row


class _RolePlan:
    """The fields of one role that the episode holds, by the key a step gives them under."""

    __slots__ = ("bare_key", "bare_row", "fields", "role")

    def __init__(self, role: Role, fields: dict[str, tuple[str, _RowOf]]) -> None:
        self.role = role
        self.fields = fields
        # a value that is not a mapping stands for the field keyed by the role itself
        bare = fields.get(role) if len(fields) == 1 else None
        self.bare_key = "" if bare is None else bare[0]
        self.bare_row = None if bare is None else bare[1]

    def add_rows(self, value: Any, rows: dict[str, _Row]) -> bool:
        """Add the rows of ``value`` to ``rows``; False when the generic path must judge.

        ``None`` stands for a role the step does not give: fine only when the episode
        holds none of its fields.
        """
        if value is None:
            return not self.fields
        row_of = self.bare_row
        if row_of is not None:
            row = row_of(value)
            if row is not None:
                rows[self.bare_key] = row
                return True
        # the mapping check comes last: isinstance against the Mapping ABC is slow, and
        # no value a row function accepts is a mapping
        if type(value) is not dict and not isinstance(value, Mapping):
            return False
        flat = flatten(value, self.role)
        fields = self.fields
        if flat.keys() != fields.keys():
            return False
        for key, item in flat.items():
            qualified_key, row_of = fields[key]
            row = row_of(item)
            if row is None:
                return False
            rows[qualified_key] = row
        return True


class StepPlan:
    """Rows of one step for a writer whose episode holds the fields ``present``.

    :meth:`prepare` returns ``None`` for every step it does not recognize as exact; the
    caller then takes the generic path, which validates the step and raises.
    """

    __slots__ = ("_empty", "_held", "_hidden", "_reset", "_roles", "present")

    def __init__(self, schema: DatasetSchema, present: frozenset[str]) -> None:
        self.present = present
        roles = []
        for canonical, role in _ROLE_KEYS:
            fields = {
                spec.key: (spec.qualified_key, _row_function(spec.np_dtype, spec.shape))
                for spec in schema.by_role(role)
                if spec.qualified_key in present
            }
            plan = _RolePlan(role, fields)
            roles.append((canonical, plan.bare_key, plan.bare_row, plan))
        self._roles = tuple(roles)
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
        """``(rows, terminated, truncated)`` with the flags as given, or ``None``."""
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
        rows: dict[str, _Row] = {}
        for canonical, bare_key, bare_row, plan in self._held:
            value = data.get(canonical)
            # the bare field inline: the common step pays no method call per role
            if bare_row is not None and (row := bare_row(value)) is not None:
                rows[bare_key] = row
            elif not plan.add_rows(value, rows):
                return None
        for canonical, plan in self._empty:
            value = data.get(canonical)
            if value is not None and not plan.add_rows(value, rows):
                return None
        return rows, data.get("terminated", False), data.get("truncated", False)

    def reset_rows(self, observation: Any, infos: Any) -> dict[str, _Row] | None:
        """Row 0 of a new episode whose reset gives exactly this plan's fields, or ``None``.

        ``infos`` is ``None`` when the reset gives none. A reset the plan accepts gives
        the observation and info fields of ``present`` and no others, so the generic
        path (``writers._reset_rows``) would derive this very ``present`` from it and
        build these very rows; every other reset is left to it.
        """
        if observation is None:
            return None
        rows: dict[str, _Row] = {}
        observations, infos_plan = self._reset
        if not (observations.add_rows(observation, rows) and infos_plan.add_rows(infos, rows)):
            return None
        for key, shape, dtype in self._hidden:
            rows[key] = np.zeros(shape, dtype=dtype)
        return rows

    def exact(self, data: Mapping[str, Any], keys: Collection[str]) -> bool:
        """Whether the roles under canonical ``keys`` of ``data`` are exact as they are.

        For values checked ahead of the step that writes them (action-out recording).
        """
        rows: dict[str, _Row] = {}
        return all(
            plan.add_rows(data.get(canonical), rows)
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
