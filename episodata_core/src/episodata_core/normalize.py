"""From user dicts to validated rows.

Users hand episodes over as dicts in one of two alignments (data-model.md §2, §6):

- **action-in**: ``initial_observation`` is the reset observation and
  ``observations[t]`` is what ``actions[t]`` produced;
- **action-out**: ``actions[t]`` was taken *at* ``observations[t]``; an optional
  ``final_observation`` is what the last action produced.

Both are converted here, once, to the storage form: T + 1 rows per field, row 0 holding
the reset observation and hidden zero action and reward. Everything is validated before
a single byte reaches a backend, so a rejected call changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from episodata_core.errors import ArgumentError, FieldNotFoundError, SchemaError

if TYPE_CHECKING:
    from episodata_core.protocols import Rows
    from episodata_core.schema import DatasetSchema, FieldSpec, Role

__all__ = [
    "Alignment",
    "SplitEpisode",
    "canonical_alignment",
    "coerce",
    "flatten",
    "split_episode",
    "split_step",
    "step_key_spellings",
    "to_rows",
]

Alignment = Literal["action-in", "action-out", "action_in", "action_out"]

# canonical bulk key -> accepted spellings; one table for bulk dicts and single steps
_ALIASES: dict[str, tuple[str, ...]] = {
    "initial_observation": ("initial_observation", "initial_obs"),
    "initial_info": ("initial_info",),
    "observations": ("observations", "observation", "obs"),
    "actions": ("actions", "action"),
    "rewards": ("rewards", "reward"),
    "infos": ("infos", "info"),
    "final_observation": ("final_observation", "final_obs"),
    "final_info": ("final_info",),
    "terminated": ("terminated",),
    "truncated": ("truncated",),
}
_CANONICAL = {alias: canonical for canonical, aliases in _ALIASES.items() for alias in aliases}
_STEP_KEYS = ("observations", "actions", "rewards", "infos", "terminated", "truncated")
_ROLE_OF: dict[str, Role] = {
    "observations": "observation",
    "actions": "action",
    "rewards": "reward",
    "infos": "info",
}


@dataclass
class SplitEpisode:
    """A bulk episode taken apart by role, in action-in form, not yet validated.

    ``observation`` and ``info`` arrays have T + 1 entries (reset first); ``action``
    and ``reward`` arrays have T. ``dropped_steps`` counts action-out steps without a
    successor observation.
    """

    observation: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    action: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    reward: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    info: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    dropped_steps: int = 0

    def fields_by_role(self) -> dict[Role, dict[str, npt.NDArray[Any]]]:
        """The arrays of each role, keyed by field key."""
        return {
            "observation": self.observation,
            "action": self.action,
            "reward": self.reward,
            "info": self.info,
        }

    @property
    def num_steps(self) -> int:
        """T, the number of transitions."""
        arrays = next(iter(self.observation.values()), None)
        if arrays is None:
            raise SchemaError("an episode needs at least one observation field")
        return int(arrays.shape[0]) - 1


def canonical_keys(data: Mapping[str, Any], allowed: Sequence[str], where: str) -> dict[str, Any]:
    """Map accepted spellings to canonical keys; unknown or doubled keys raise."""
    result: dict[str, Any] = {}
    for key, value in data.items():
        canonical = _CANONICAL.get(key)
        if canonical is None or canonical not in allowed:
            accepted = sorted(a for c in allowed for a in _ALIASES[c])
            raise FieldNotFoundError(f"{where}: unknown key {key!r} (accepted keys: {accepted})")
        if canonical in result:
            raise SchemaError(
                f"{where}: {canonical!r} is given twice (as {key!r} and another spelling); "
                "pass it once"
            )
        result[canonical] = value
    return result


def flatten(value: Any, role: Role) -> dict[str, Any]:
    """A role's value as ``{key: value}``: a bare value gets the role's own key.

    Nested mappings become ``/``-separated keys: ``{"keyboard": {"jump": x}}`` gives
    ``{"keyboard/jump": x}``.
    """
    if not isinstance(value, Mapping):
        return {role: value}
    flat: dict[str, Any] = {}
    _flatten_into(value, "", flat)
    return flat


def _flatten_into(mapping: Mapping[Any, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten_into(value, name + "/", out)
        else:
            out[name] = value


def split_episode(
    episode: Mapping[str, Any],
    schema: DatasetSchema | None,
    *,
    alignment: Alignment | None = None,
    where: str = "episode",
) -> SplitEpisode:
    """Take a bulk episode dict apart and convert it to action-in form.

    ``alignment`` defaults to what the keys say: ``initial_observation`` means
    action-in, ``final_observation`` action-out. Pass ``alignment="action-out"`` for
    action-out data without a final observation; its unpaired last step is dropped.
    """
    if not isinstance(episode, Mapping):
        raise SchemaError(f"{where}: expected a dict of arrays, got {type(episode).__name__}")
    data = canonical_keys(episode, list(_ALIASES), where)
    if "observations" not in data:
        raise SchemaError(f"{where}: 'observations' is missing")

    per_step: dict[str, dict[str, npt.NDArray[Any]]] = {
        canonical: _arrays(flatten(data[canonical], _ROLE_OF[canonical]))
        for canonical in ("observations", "actions", "rewards", "infos")
        if canonical in data
    }
    # lengths before alignment: one observation more than actions usually means the reset
    # observation was left in 'observations', and the length error says what to do
    num_entries = _common_length(per_step, where, _extra_observation_hint(data))
    alignment = _alignment(data, alignment, where)
    split = SplitEpisode()
    if alignment == "action-in":
        _check_absent(data, ("final_observation", "final_info"), "action-in", where)
        if "infos" in data and "initial_info" not in data:
            raise SchemaError(
                f"{where}: 'infos' needs 'initial_info' too (the info of the reset "
                "observation), so that infos line up with observations"
            )
        initial = _arrays(flatten(data["initial_observation"], "observation"))
        split.observation = _prepend(initial, per_step["observations"], "observation", where)
        if "infos" in data:
            initial_info = _arrays(flatten(data["initial_info"], "info"))
            split.info = _prepend(initial_info, per_step["infos"], "info", where)
        split.action = per_step.get("actions", {})
        split.reward = per_step.get("rewards", {})
        steps = num_entries
    else:
        _check_absent(data, ("initial_observation", "initial_info"), "action-out", where)
        if "final_observation" in data:
            final = _arrays(flatten(data["final_observation"], "observation"))
            split.observation = _append(per_step["observations"], final, "observation", where)
            if "infos" in data:
                if "final_info" not in data:
                    raise SchemaError(
                        f"{where}: 'infos' with 'final_observation' needs 'final_info' too"
                    )
                final_info = _arrays(flatten(data["final_info"], "info"))
                split.info = _append(per_step["infos"], final_info, "info", where)
            split.action = per_step.get("actions", {})
            split.reward = per_step.get("rewards", {})
            steps = num_entries
        else:
            # without a successor observation the last action and reward pair with nothing
            _check_absent(data, ("final_info",), "action-out without final_observation", where)
            split.observation = per_step["observations"]
            split.info = per_step.get("infos", {})
            split.action = {k: v[:-1] for k, v in per_step.get("actions", {}).items()}
            split.reward = {k: v[:-1] for k, v in per_step.get("rewards", {}).items()}
            steps = max(num_entries - 1, 0)
            split.dropped_steps = num_entries - steps
    terminated = _episode_flag(data.get("terminated", False), "terminated", num_entries, where)
    truncated = _episode_flag(data.get("truncated", False), "truncated", num_entries, where)
    if split.dropped_steps and (terminated or truncated):
        # the flagged step was the dropped one: the kept episode stops short of its end
        terminated, truncated = False, True
    split.terminated, split.truncated = terminated, truncated
    if schema is not None:
        _check_against_schema(split, schema, where)
    return split


def canonical_alignment(alignment: str) -> Literal["action-in", "action-out"]:
    """``"action-in"`` or ``"action-out"`` for either spelling (``"action_in"`` is 0.2's)."""
    spelled = {"action-in": "action-in", "action_in": "action-in"}
    spelled.update({"action-out": "action-out", "action_out": "action-out"})
    if alignment not in spelled:
        raise ArgumentError(
            f"alignment must be 'action-in' or 'action-out' ('action_in'/'action_out' "
            f"too), got {alignment!r}"
        )
    return "action-in" if spelled[alignment] == "action-in" else "action-out"


def _alignment(
    data: Mapping[str, Any], alignment: Alignment | None, where: str
) -> Literal["action-in", "action-out"]:
    if alignment is not None:
        canonical = canonical_alignment(alignment)
        if canonical == "action-in" and "initial_observation" not in data:
            raise SchemaError(f"{where}: action-in episodes need 'initial_observation'")
        return canonical
    if "initial_observation" in data:
        return "action-in"
    if "final_observation" in data:
        return "action-out"
    raise SchemaError(
        f"{where}: cannot tell how observations and actions line up. Pass "
        "'initial_observation' (action-in: observations[t] is what actions[t] produced), "
        "'final_observation' (action-out: actions[t] is taken at observations[t]), or "
        "alignment='action-out' to drop the last step, which has no next observation"
    )


def _check_absent(data: Mapping[str, Any], keys: Sequence[str], form: str, where: str) -> None:
    for key in keys:
        if key in data:
            raise SchemaError(f"{where}: {key!r} does not belong in an {form} episode")


def _arrays(flat: Mapping[str, Any]) -> dict[str, npt.NDArray[Any]]:
    return {key: np.asarray(value) for key, value in flat.items()}


def _extra_observation_hint(data: Mapping[str, Any]) -> str:
    """What to do when 'observations' has one entry more than the actions."""
    for key, which in (("initial_observation", "reset"), ("final_observation", "last")):
        if key in data:
            return (
                f" {key!r} already holds the {which} observation: leave it out of 'observations'."
            )
    return " Pass the reset observation as 'initial_observation'."


def _common_length(
    per_step: Mapping[str, Mapping[str, npt.NDArray[Any]]], where: str, extra_hint: str
) -> int:
    reference: tuple[str, int] | None = None
    # actions decide T when present: a length error then points at the observations
    for canonical in ("actions", "observations", "rewards", "infos"):
        for key, array in per_step.get(canonical, {}).items():
            name = canonical if key == _ROLE_OF[canonical] else f"{canonical}/{key}"
            if array.ndim == 0:
                raise SchemaError(
                    f"{where}, field {name!r}: expected one entry per step, got a scalar"
                )
            if reference is None:
                reference = (name, int(array.shape[0]))
            elif array.shape[0] != reference[1]:
                hint = (
                    extra_hint
                    if canonical == "observations" and array.shape[0] == reference[1] + 1
                    else ""
                )
                raise SchemaError(
                    f"{where}, field {name!r}: expected {reference[1]} entries (one per "
                    f"step, as in {reference[0]!r}), got {array.shape[0]}.{hint}"
                )
    assert reference is not None  # observations are always present
    return reference[1]


def _prepend(
    first: Mapping[str, npt.NDArray[Any]],
    rest: Mapping[str, npt.NDArray[Any]],
    role: Role,
    where: str,
) -> dict[str, npt.NDArray[Any]]:
    _same_keys(first, rest, role, where)
    return {key: _stack_row(first[key], rest[key], key, where, prepend=True) for key in rest}


def _append(
    rest: Mapping[str, npt.NDArray[Any]],
    last: Mapping[str, npt.NDArray[Any]],
    role: Role,
    where: str,
) -> dict[str, npt.NDArray[Any]]:
    _same_keys(last, rest, role, where)
    return {key: _stack_row(last[key], rest[key], key, where, prepend=False) for key in rest}


def _same_keys(
    single: Mapping[str, Any], per_step: Mapping[str, Any], role: Role, where: str
) -> None:
    if set(single) != set(per_step):
        raise SchemaError(
            f"{where}: the single {role} has keys {sorted(single)} but the per-step "
            f"{role}s have {sorted(per_step)}; both need the same fields"
        )


def _stack_row(
    row: npt.NDArray[Any], rows: npt.NDArray[Any], key: str, where: str, *, prepend: bool
) -> npt.NDArray[Any]:
    if row.shape != rows.shape[1:]:
        raise SchemaError(
            f"{where}, field {key!r}: the {'initial' if prepend else 'final'} value has shape "
            f"{row.shape} but the per-step values have shape {rows.shape[1:]}"
        )
    joined = _joined_view(row, rows, prepend=prepend)
    if joined is not None:
        return joined
    out = np.empty((rows.shape[0] + 1, *rows.shape[1:]), dtype=np.result_type(row, rows))
    if prepend:
        out[0], out[1:] = row, rows
    else:
        out[:-1], out[-1] = rows, row
    return out


def _joined_view(
    row: npt.NDArray[Any], rows: npt.NDArray[Any], *, prepend: bool
) -> npt.NDArray[Any] | None:
    """``row`` and ``rows`` as one read-only view when their buffer already holds them in order.

    Importers slice an episode out of a column they read whole: ``column[s]`` and
    ``column[s + 1 : s + n]`` are then rows ``[s, s + n)`` of one buffer, and joining
    them needs no copy. Both must be views of the same owner with the same row layout,
    ``row`` exactly one row before (or after) ``rows``: every byte of the result is
    then a byte of ``row`` or of ``rows``, so the view cannot reach outside the buffer.
    """
    if row.dtype != rows.dtype or row.strides != rows.strides[1:] or row.shape != rows.shape[1:]:
        return None
    if _owner(row) is not _owner(rows):
        return None
    step = rows.strides[0]
    first, last = (row, rows) if prepend else (rows, row)
    gap = _address(last) - _address(first)
    if gap != (step if prepend else step * rows.shape[0]):
        return None
    return np.lib.stride_tricks.as_strided(
        first, shape=(rows.shape[0] + 1, *rows.shape[1:]), strides=rows.strides, writeable=False
    )


def _owner(array: npt.NDArray[Any]) -> object:
    """The object that owns an array's memory (NumPy keeps ``base`` pointing at it)."""
    owner: object = array
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner


def _address(array: npt.NDArray[Any]) -> int:
    return int(array.__array_interface__["data"][0])


def _episode_flag(value: Any, name: str, num_steps: int, where: str) -> bool:
    flags = np.asarray(value)
    if flags.ndim == 0:
        return _truthy(flags, name, where)
    if flags.shape != (num_steps,):
        raise SchemaError(
            f"{where}, {name!r}: expected a scalar or {num_steps} per-step flags, "
            f"got shape {flags.shape}"
        )
    if num_steps == 0:
        return False
    early = np.flatnonzero(flags[:-1].astype(bool))
    if early.size:
        raise SchemaError(
            f"{where}, {name!r}: True at step {int(early[0])} before the last step "
            f"{num_steps - 1}; an episode ends at its first {name} step, so split it there"
        )
    return bool(flags[-1])


def _truthy(flag: npt.NDArray[Any], name: str, where: str) -> bool:
    if flag.dtype.kind not in "biuf":
        raise SchemaError(f"{where}, {name!r}: expected a bool, got {flag.dtype} {flag!r}")
    return bool(flag)


def _check_against_schema(split: SplitEpisode, schema: DatasetSchema, where: str) -> None:
    for role, fields in split.fields_by_role().items():
        declared = {spec.key: spec for spec in schema.by_role(role)}
        for key in fields:
            if key not in declared:
                raise FieldNotFoundError(
                    f"{where}: unknown {role} field {key!r} (the schema's {role} fields are "
                    f"{sorted(declared)})"
                )
        for key, spec in declared.items():
            if key not in fields and not spec.optional:
                given = f"given: {sorted(fields)}" if fields else f"no {role} field was given"
                raise SchemaError(f"{where}: required {role} field {key!r} is missing ({given})")


def to_rows(split: SplitEpisode, schema: DatasetSchema, *, where: str = "episode") -> Rows:
    """Validated storage rows ``[T + 1, ...]`` per qualified key, action/reward row 0 zero."""
    rows: dict[str, npt.NDArray[Any]] = {}
    for role, fields in split.fields_by_role().items():
        for key, values in fields.items():
            spec = schema.field(role, key)
            coerced = coerce(values, spec, where=where, leading=values.shape[:1])
            if role in ("action", "reward"):
                # the hidden row 0 keeps every field at T + 1 rows, so one window read
                # serves every role; no read ever returns it
                padded = np.zeros((coerced.shape[0] + 1, *spec.shape), dtype=spec.np_dtype)
                padded[1:] = coerced
                coerced = padded
            rows[spec.qualified_key] = coerced
    return rows


def split_step(step: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One step dict with canonical keys; unknown keys raise."""
    if not isinstance(step, Mapping):
        raise SchemaError(f"{where}: expected a dict, got {type(step).__name__}")
    return canonical_keys(step, _STEP_KEYS, where)


def step_key_spellings() -> dict[str, str]:
    """Every accepted spelling of a step key, mapped to its canonical key."""
    return {alias: canonical for alias, canonical in _CANONICAL.items() if canonical in _STEP_KEYS}


def coerce(
    value: Any, spec: FieldSpec, *, where: str, leading: tuple[int, ...] = ()
) -> npt.NDArray[Any]:
    """``value`` as an array of the field's dtype and shape ``[*leading, *spec.shape]``.

    Casts happen only when exact: integers must fit, floats going into integer fields
    must be whole and finite, bool fields take 0/1. Floats narrow to smaller floats as
    long as they stay finite.
    """
    array = np.asarray(value)
    expected = (*leading, *spec.shape)
    if array.shape != expected:
        if leading and array.shape[: len(leading)] == leading:
            # the step count is right: talk about one step, not about stored rows
            per_step = array.shape[len(leading) :]
            raise SchemaError(
                f"{where}, {spec.role} field {spec.key!r}: expected per-step shape "
                f"{spec.shape}, got {per_step}{_shape_hint(per_step, spec.shape)}"
            )
        raise SchemaError(
            f"{where}, {spec.role} field {spec.key!r}: expected shape {expected}, "
            f"got {array.shape}{_shape_hint(array.shape, expected)}"
        )
    target = spec.np_dtype
    if array.dtype == target:
        return array
    problem = _cast_problem(array, target)
    if problem is not None:
        raise SchemaError(
            f"{where}, {spec.role} field {spec.key!r}: {problem}; the field's dtype is "
            f"{spec.dtype}. Convert the data or declare the field with another dtype"
        )
    return array.astype(target)


def _shape_hint(actual: tuple[int, ...], expected: tuple[int, ...]) -> str:
    if actual == (*expected, 1):
        return " (drop the trailing axis of size 1)"
    if len(actual) == len(expected) + 1 and actual[1:] == expected:
        return " (one entry was given per step where a single value is expected)"
    return ""


def _cast_problem(array: npt.NDArray[Any], target: np.dtype[Any]) -> str | None:
    source = array.dtype
    if target.kind in "US":
        if source.kind != target.kind:
            return f"got {source} values for a string field"
        if source.itemsize > target.itemsize and array.size:
            longest = max(len(x) for x in array.reshape(-1).tolist())
            if longest * (4 if target.kind == "U" else 1) > target.itemsize:
                return f"a string of length {longest} does not fit"
        return None
    if source.kind not in "biuf":
        return f"got {source} values, which are not numbers"
    if target.kind == "b":
        if source.kind == "b" or (array.size == 0) or bool(np.isin(array, (0, 1)).all()):
            return None
        return f"got {_first_bad(array, ~np.isin(array, (0, 1)))}, not 0/1 or a bool"
    if target.kind in "iu":
        if source.kind == "f":
            finite = np.isfinite(array)
            if not finite.all():
                return f"got {_first_bad(array, ~finite)}, which an integer cannot hold"
            whole = np.mod(array, 1) == 0
            if not whole.all():
                return f"got the fractional value {_first_bad(array, ~whole)}"
        if array.size and source.kind != "b":
            info = np.iinfo(target)
            outside = (array < info.min) | (array > info.max)
            if outside.any():
                return (
                    f"got {_first_bad(array, outside)}, outside the range [{info.min}, {info.max}]"
                )
        return None
    if target.kind == "f" and source.kind == "f" and array.size:
        limit = np.finfo(target).max
        overflow = np.isfinite(array) & (np.abs(array) > limit)
        if overflow.any():
            return f"got {_first_bad(array, overflow)}, too large for {target}"
    return None


def _first_bad(array: npt.NDArray[Any], bad: npt.NDArray[np.bool_]) -> str:
    flat = np.asarray(bad).reshape(-1)
    position = int(np.argmax(flat))
    value = array.reshape(-1)[position]
    if array.ndim == 0:
        return repr(value.item())
    index = np.unravel_index(position, array.shape)
    return f"{value.item()!r} at index {tuple(int(i) for i in index)}"
