"""Which NPZ members each segment file of a label holds (formats.md §3.3).

A label's layout is fixed before any file is written: one member per selected field
(named by its key), the ``terminated``/``truncated`` flag members when they are written,
``segment_step_idx``, the re-expanded row-constant provenance columns, and the 0-d
scalars. Every file of a label has exactly these members, dtypes and shapes, which is
what the manifest's ``fields`` and ``scalars`` record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from episodata_core.schema import DatasetSchema, FieldSpec
    from episodata_segments._manifest import MemberRole
    from episodata_segments._provenance import Provenance

__all__ = [
    "RESERVED",
    "SCALAR_NAMES",
    "FieldRules",
    "LabelLayout",
    "Member",
    "field_rules",
    "label_layout",
]

SCALAR_NAMES = ("env", "goal_step", "offset", "source_episode", "start_step")
RESERVED = frozenset({*SCALAR_NAMES, "segment_step_idx", "terminated", "truncated"})
_FLOAT_KINDS = "fc"

MemberKind = Literal["field", "flag", "step", "constant"]


@dataclass(frozen=True)
class Member:
    """One per-row NPZ member: ``rows`` rows of ``shape`` in ``dtype``."""

    name: str
    kind: MemberKind
    role: MemberRole
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    rows: int
    layout: str | None = None
    qualified_key: str | None = None


@dataclass(frozen=True)
class FieldRules:
    """The selected fields of a label and the finiteness rules that apply to them."""

    specs: tuple[FieldSpec, ...]
    finite_required: tuple[str, ...]
    diagnostic: tuple[str, ...]

    @property
    def finite_keys(self) -> tuple[str, ...]:
        """Qualified keys of the finiteness-required fields."""
        return tuple(s.qualified_key for s in self.specs if s.key in self.finite_required)


@dataclass(frozen=True)
class LabelLayout:
    """Every member of a label's segment files, plus the per-label rules."""

    label: str
    offset: int
    members: tuple[Member, ...]
    scalars: dict[str, np.dtype[Any]]
    rules: FieldRules
    flags_written: bool
    index_column: str | None
    constants: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    @property
    def field_keys(self) -> tuple[str, ...]:
        """Qualified keys of the dataset fields to read."""
        return tuple(m.qualified_key for m in self.members if m.qualified_key is not None)

    @property
    def nan_counted(self) -> tuple[str, ...]:
        """Float field members that may hold NaN; counted per segment in ``nan_counts``."""
        return tuple(
            m.name
            for m in self.members
            if m.kind == "field"
            and m.dtype.kind in _FLOAT_KINDS
            and m.name not in self.rules.finite_required
        )

    def reset_reward_fill(self) -> dict[str, float | int | str]:
        """What row 0 of each reward member holds when a segment starts at the reset."""
        return {
            m.name: "nan" if m.dtype.kind in _FLOAT_KINDS else 0
            for m in self.members
            if m.role == "reward"
        }

    def expected_headers(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """Shape and dtype of every member, scalars included, as ``.npy`` headers say them."""
        headers = {m.name: ((m.rows, *m.shape), m.dtype) for m in self.members}
        headers.update({name: ((), dtype) for name, dtype in self.scalars.items()})
        return headers


def field_rules(
    schema: DatasetSchema,
    label: str,
    fields: Sequence[str] | None,
    state_fields: Sequence[str],
    diagnostic_fields: Sequence[str],
) -> FieldRules:
    """Select the exported fields and resolve which must be finite.

    Finiteness is required of action-role fields, float observation-role fields that are
    not diagnostics, and the state fields present; other float fields keep their NaNs.
    """
    specs = schema.resolve(None if fields is None else list(fields))
    where = f"label {label!r}"
    if not any(s.role == "action" for s in specs):
        raise FormatError(
            f"{where}: the exported fields {[s.key for s in specs]} include no action-role "
            "field; segments need actions (select one with fields=)"
        )
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.key in RESERVED:
            raise FormatError(
                f"{where}: field {spec.qualified_key!r} is named like a reserved segment member "
                f"({sorted(RESERVED)}); leave it out with fields= or rename it"
            )
        if spec.key in seen:
            raise FormatError(
                f"{where}: fields {seen[spec.key]!r} and {spec.qualified_key!r} would both be "
                f"stored as NPZ member {spec.key!r}; export only one of them (fields=)"
            )
        seen[spec.key] = spec.qualified_key
    keys = {s.key for s in specs}
    both = sorted(set(state_fields) & set(diagnostic_fields) & keys)
    if both:
        raise FormatError(
            f"{where}: {both} are listed as state_fields (must be finite) and as "
            "diagnostic_fields (NaN allowed); list each field in one of them"
        )
    diagnostic = tuple(k for k in diagnostic_fields if k in keys)
    finite = tuple(
        s.key
        for s in specs
        if s.role == "action"
        or s.key in state_fields
        or (s.role == "observation" and s.np_dtype.kind in _FLOAT_KINDS and s.key not in diagnostic)
    )
    return FieldRules(specs=specs, finite_required=finite, diagnostic=diagnostic)


def _constant_values(
    provenance: Provenance, episodes: Sequence[int], label: str
) -> dict[str, tuple[Any, ...]]:
    names: dict[str, None] = {}
    for episode in episodes:
        listed = provenance.extra(episode, "row_constant_columns", []) or []
        names.update(dict.fromkeys(str(n) for n in listed))
    constants: dict[str, tuple[Any, ...]] = {}
    for name in names:
        values = tuple(provenance.column(episode, name) for episode in episodes)
        missing = [e for e, v in zip(episodes, values, strict=True) if v is None]
        if missing:
            raise FormatError(
                f"label {label!r}: row-constant column {name!r} has no value for episodes "
                f"{missing[:5]}; the import records are inconsistent"
            )
        constants[name] = values
    return constants


def _constant_dtype(name: str, values: Iterable[Any], label: str) -> np.dtype[Any]:
    values = list(values)
    if all(isinstance(v, str) for v in values):
        return np.dtype(f"<U{max(1, *(len(v) for v in values))}")
    if all(isinstance(v, bool) for v in values):
        return np.dtype(bool)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return np.dtype(np.int64)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return np.dtype(np.float64)
    raise FormatError(
        f"label {label!r}: row-constant column {name!r} mixes value types "
        f"{sorted({type(v).__name__ for v in values})}; it cannot become one NPZ member"
    )


def label_layout(
    label: str,
    offset: int,
    rules: FieldRules,
    provenance: Provenance,
    episodes: Sequence[int],
    flags: Literal["auto", "always", "never"],
) -> LabelLayout:
    """The members of every segment file of ``label`` for the planned ``episodes``."""
    members: list[Member] = []
    for spec in rules.specs:
        rows = offset if spec.role == "action" else offset + 1
        members.append(
            Member(
                name=spec.key,
                kind="field",
                role=spec.role,
                dtype=spec.np_dtype,
                shape=tuple(spec.shape),
                rows=rows,
                layout=spec.layout,
                qualified_key=spec.qualified_key,
            )
        )
    if flags == "auto":
        flags_written = all(provenance.flags_present(e) for e in episodes)
    else:
        flags_written = flags == "always"
    per_row = offset + 1
    if flags_written:
        members += [
            Member(name, "flag", "flag", np.dtype(bool), (), per_row)
            for name in ("terminated", "truncated")
        ]
    members.append(Member("segment_step_idx", "step", "info", np.dtype(np.int64), (), per_row))
    constants = _constant_values(provenance, episodes, label)
    taken = {m.name for m in members} | set(SCALAR_NAMES)
    for name, values in constants.items():
        if name in taken:
            raise FormatError(
                f"label {label!r}: row-constant column {name!r} collides with a field or a "
                "reserved member of the same name; drop one of them at import"
            )
        dtype = _constant_dtype(name, values, label)
        members.append(Member(name, "constant", "info", dtype, (), per_row))
    index_columns = {provenance.extra(e, "index_column") for e in episodes}
    index_column = index_columns.pop() if len(index_columns) == 1 else None
    scalars = {
        "env": np.dtype(f"<U{len(label)}"),
        "goal_step": np.dtype(np.int64),
        "offset": np.dtype(np.int64),
        "source_episode": np.dtype(np.int64),
        "start_step": np.dtype(np.int64),
    }
    return LabelLayout(
        label=label,
        offset=offset,
        members=tuple(sorted(members, key=lambda m: m.name)),
        scalars=scalars,
        rules=rules,
        flags_written=flags_written,
        index_column=index_column if isinstance(index_column, str) else None,
        constants=constants,
    )
