"""Exporter validation of each written segment file (formats.md §3.8, V1-V5).

Every check re-reads what was written and compares it with an independent source: V1
with the arrays handed to the writer, V2 with the dataset read again through its
transition accessors (``all_obs``, ``action``, ``reward``), V3-V5 with the plan and the
rules. A failure raises :class:`IntegrityError` naming the check, segment and member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from episodata_core.errors import IntegrityError
from episodata_segments._npz import content_sha256
from episodata_segments._segment import finite_problems, nan_counts, reset_fill

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from episodata_core.dataset import Dataset
    from episodata_core.schema import Role
    from episodata_core.views import TransitionView
    from episodata_segments._layout import LabelLayout
    from episodata_segments._segment import SegmentCut

    Arrays = Mapping[str, npt.NDArray[Any]]

__all__ = ["arrays_equal", "validate_segment"]


def arrays_equal(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> bool:
    """Same dtype, shape and values; floats NaN-aware (``equal_nan`` raises on strings)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _fail(check: str, cut: SegmentCut, message: str) -> IntegrityError:
    return IntegrityError(
        f"validation {check} failed for label {cut.label!r}, {cut.describe()}: {message}; the "
        "archive was not published"
    )


def _role_arrays(view: TransitionView, role: Role, value: Any) -> dict[str, Any]:
    if view.schema.is_bare(role):
        return {role: value}
    return dict(value.flat())


def _expected_fields(dataset: Dataset, layout: LabelLayout, cut: SegmentCut) -> dict[str, Any]:
    """Field members as the dataset's transition accessors give them (V2)."""
    episode = dataset.episode(cut.episode)
    read = episode.segment(cut.start, cut.goal, fields=layout.field_keys)
    roles = {m.role for m in layout.members if m.kind == "field"}
    by_role: dict[str, dict[str, Any]] = {}
    if "observation" in roles:
        by_role["observation"] = _role_arrays(read, "observation", read.all_obs)
    if "info" in roles:
        by_role["info"] = _role_arrays(read, "info", read.all_infos)
    if "action" in roles:
        by_role["action"] = _role_arrays(read, "action", read.action)
    if "reward" in roles:
        rewards = _role_arrays(read, "reward", read.reward)
        before: dict[str, Any] = {}
        if cut.start > 0:
            # the reward that arrived at the segment's first observation: transition s - 1
            keys = [
                m.qualified_key for m in layout.members if m.qualified_key and m.role == "reward"
            ]
            previous = episode.step(cut.start - 1, fields=keys)
            before = _role_arrays(previous, "reward", previous.reward)
        full = {}
        for key, value in rewards.items():
            first = before[key] if cut.start > 0 else reset_fill(np.asarray(value).dtype)
            head = np.asarray(first, dtype=np.asarray(value).dtype).reshape(1, *value.shape[1:])
            full[key] = np.concatenate([head, value])
        by_role["reward"] = full
    expected = {}
    for member in layout.members:
        if member.kind == "field":
            expected[member.name] = np.asarray(by_role[member.role][member.name])
    return expected


def validate_segment(
    path: Path,
    written: Arrays,
    dataset: Dataset,
    layout: LabelLayout,
    cut: SegmentCut,
    counts: Mapping[str, int],
    digest: str,
) -> None:
    """Run V1-V5 (and the content-hash half of V8) on one freshly written segment file."""
    with np.load(path, allow_pickle=False) as npz:
        loaded = {name: npz[name] for name in npz.files}
    # V1: the file holds exactly what was written
    if set(loaded) != set(written):
        raise _fail("V1", cut, f"members {sorted(loaded)} != written {sorted(written)}")
    for name, value in written.items():
        if not arrays_equal(loaded[name], value):
            raise _fail("V1", cut, f"member {name!r} reads back differently")
    if content_sha256(loaded) != digest:
        raise _fail("V8", cut, "content_sha256 does not recompute to the recorded value")
    # V2: every field member equals the dataset's rows s..s+K
    for name, value in _expected_fields(dataset, layout, cut).items():
        if not arrays_equal(loaded[name], value):
            raise _fail("V2", cut, f"member {name!r} differs from the source rows")
    _check_counts(loaded, layout, cut)
    _check_boundaries(loaded, layout, cut)
    # V5: finiteness and NaN counts
    problems = finite_problems(loaded, layout.rules.finite_required)
    if problems:
        raise _fail("V5", cut, "; ".join(problems))
    if nan_counts(loaded, layout) != dict(counts):
        raise _fail("V5", cut, f"nan_counts recompute to {nan_counts(loaded, layout)}")


def _check_counts(loaded: Arrays, layout: LabelLayout, cut: SegmentCut) -> None:
    offset = layout.offset
    for member in layout.members:
        want = offset if member.role == "action" else offset + 1
        if loaded[member.name].shape[:1] != (want,):
            raise _fail(
                "V3", cut, f"member {member.name!r} has {loaded[member.name].shape[:1]} rows"
            )
    steps = np.arange(offset + 1, dtype=np.int64)
    if not np.array_equal(loaded["segment_step_idx"], steps):
        raise _fail("V3", cut, "segment_step_idx is not arange(K + 1)")
    if "step_idx" in loaded and not np.array_equal(loaded["step_idx"], cut.start + steps):
        raise _fail(
            "V3",
            cut,
            f"step_idx is {loaded['step_idx'].tolist()}, not start + arange(K + 1); the "
            "source's step_idx is not the local row",
        )
    scalars = {
        "env": cut.label,
        "source_episode": cut.episode,
        "start_step": cut.start,
        "goal_step": cut.goal,
        "offset": offset,
    }
    for name, value in scalars.items():
        if loaded[name].shape != () or loaded[name].item() != value:
            raise _fail("V3", cut, f"scalar {name!r} is {loaded[name]!r}, not {value!r}")


def _check_boundaries(loaded: Arrays, layout: LabelLayout, cut: SegmentCut) -> None:
    if not 0 <= cut.start <= cut.goal <= cut.transitions:
        raise _fail(
            "V4", cut, f"rows {cut.start}..{cut.goal} leave the episode of T={cut.transitions}"
        )
    index = layout.index_column
    if index is not None and index in loaded:
        column = loaded[index]
        if column.size and not np.all(column == column.reshape(-1)[0]):
            raise _fail("V4", cut, f"index column {index!r} is not constant")
        wanted = cut.source_episode_id
        if wanted is not None and column.size and column.reshape(-1)[0].item() != wanted:
            raise _fail(
                "V4", cut, f"index column {index!r} is {column.reshape(-1)[0]!r}, not {wanted!r}"
            )
    for flag in ("terminated", "truncated"):
        if flag not in loaded:
            continue
        rows = np.flatnonzero(loaded[flag])
        if rows.size and (rows.tolist() != [layout.offset] or not cut.at_end):
            raise _fail("V4", cut, f"{flag} is True at rows {rows.tolist()}")
