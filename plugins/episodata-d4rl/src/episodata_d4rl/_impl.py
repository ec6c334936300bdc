"""The D4RL import itself: validate, find episodes, then write them batch by batch.

Order (formats.md §0.2): structure (``_layout``), flag values, a chunked pre-pass over
the large columns (non-finite counts and the next-observation test), episode
boundaries, warnings; only then the first write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from episodata_core.errors import FormatError
from episodata_core.importing import WarningLog, field_reports, flag_counts, source_record
from episodata_core.transfer import ImportResult
from episodata_d4rl._boundaries import END_REASONS, find_episodes, plan_episodes
from episodata_d4rl._layout import inspect_file, open_file
from episodata_d4rl._metadata import metadata_tree
from episodata_d4rl._report import D4RLReport
from episodata_d4rl._write import write_episodes

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_d4rl._layout import Layout
    from episodata_d4rl._options import D4RLOptions

__all__ = ["import_file", "read_schema"]

READ_BUDGET_BYTES = 256 << 20
"""Largest read of the pre-pass and the write pass, in bytes (D4RL files are a few GB)."""

KNOWN_ISSUES = {
    "generic": [],
    "maze2d": [
        (
            "rewards[i] tests the goal on observations[i], not on the observation the action "
            "led to (off by one, D4RL issue #194); rewards are stored as they are"
        )
    ],
    "antmaze": [
        "v0 timeouts are misaligned (D4RL issue #77); this cannot be detected from the file"
    ],
}


def read_schema(path: str, options: D4RLOptions) -> DatasetSchema:
    """The schema an import of ``path`` produces; raises on a malformed file."""
    with open_file(path) as handle:
        return inspect_file(handle, path, options).schema


@dataclass
class Scan:
    """What the pre-pass learnt from the large columns."""

    mismatch: npt.NDArray[np.bool_] | None
    non_finite: dict[str, int]
    cache: dict[str, npt.NDArray[Any]]


def import_file(path: str, dataset: Dataset, options: D4RLOptions) -> ImportResult:
    """Validate ``path`` completely, then append its episodes to ``dataset``."""
    with open_file(path) as handle:
        layout = inspect_file(handle, path, options)
        log = WarningLog(repr(path), package="episodata_d4rl")
        for code, message, count in layout.warnings:
            log.add(code, message, count)
        terminals = _flags(handle, path, "terminals")
        timeouts = _flags(handle, path, "timeouts") if layout.has_timeouts else None
        rewards = np.asarray(handle["rewards"][()]).reshape(layout.num_rows)
        split_rule = options.split_on_next_obs_mismatch
        if split_rule == "auto":
            split_rule = not layout.has_timeouts
        split_rule = split_rule and layout.next_key is not None  # rule 4 needs next_obs
        scan = _scan(handle, layout, rewards, options.next_obs_atol)
        step_limit = options.max_episode_steps if not layout.has_timeouts else None
        episodes = find_episodes(
            terminals,
            timeouts if timeouts is not None else np.zeros(layout.num_rows, dtype=bool),
            use_terminals=options.profile == "generic",
            step_limit=step_limit,
            mismatch=scan.mismatch if split_rule else None,
        )
        _warn_about_source(log, layout, options, terminals, episodes.end, scan, bool(split_rule))
        if not layout.has_timeouts and step_limit is None and not split_rule:
            log.add(
                "no_timeouts",
                "the file has no 'timeouts': episodes end only at terminals and at the file "
                "end. Pass max_episode_steps= (the env's time limit) to split time-limited "
                "episodes",
            )
        plan = plan_episodes(
            episodes,
            num_rows=layout.num_rows,
            case_a=layout.next_key is not None,
            maze2d=options.profile == "maze2d",
            keep_final_partial=options.keep_final_partial,
            min_transitions=options.min_transitions,
        )
        log.finish(strict=options.strict)  # the last check before the first write
        write_episodes(
            handle,
            dataset,
            layout,
            episodes,
            plan,
            rewards=rewards,
            terminals=terminals,
            cache=scan.cache,
            budget=READ_BUDGET_BYTES,
            # what the backend holds while it writes stays small next to the batch
            write_bytes=READ_BUDGET_BYTES // 16,
        )
        metadata = handle.get("metadata")
        tree = (
            metadata_tree(metadata, options.metadata_arrays)
            if isinstance(metadata, h5py.Group)
            else {}
        )
    return _result(path, layout, options, episodes, plan, log, tree)


def _flags(handle: Any, path: str, key: str) -> npt.NDArray[np.bool_]:
    values = np.asarray(handle[key][()])
    values = values.reshape(values.shape[0])
    if values.dtype.kind == "b":
        return values
    if values.dtype.kind not in "iuf":
        raise FormatError(f"{path!r}: {key!r} has dtype {values.dtype}; expected bool or 0/1")
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        shown = ", ".join(f"row {int(r)}: {values[r].item()!r}" for r in bad[:5])
        raise FormatError(
            f"{path!r}: {key!r} must hold bool or 0/1 values; {bad.size} row(s) do not "
            f"({shown}). The file is damaged or {key!r} is not a flag column"
        )
    return np.asarray(values != 0, dtype=bool)


def _scan(handle: Any, layout: Layout, rewards: npt.NDArray[Any], atol: float) -> Scan:
    """Non-finite counts and the next-observation test, read in bounded blocks."""
    keys = [layout.observation_key, "actions", *([layout.next_key] if layout.next_key else [])]
    datasets = {key: handle[key] for key in keys}
    row_bytes = sum(
        d.dtype.itemsize * int(np.prod(d.shape[1:], dtype=np.int64)) for d in datasets.values()
    )
    n = layout.num_rows
    # a file that fits the budget is read once: the write pass takes the arrays from here
    keep = row_bytes * n <= READ_BUDGET_BYTES
    block = max(1, READ_BUDGET_BYTES // max(row_bytes, 1))
    counts = dict.fromkeys(keys, 0)
    counts["rewards"] = _count_non_finite(rewards)
    mismatch = np.zeros(n, dtype=bool) if layout.next_key else None
    cache: dict[str, npt.NDArray[Any]] = {}
    for a in range(0, n, block):
        b = min(a + block, n)
        # one row more of observations: row i is compared with next_observations[i - 1]
        parts = {
            key: d[a : min(b + 1, n)] if key == layout.observation_key else d[a:b]
            for key, d in datasets.items()
        }
        for key, values in parts.items():
            counts[key] += _count_non_finite(
                values[: b - a] if key == layout.observation_key else values
            )
        if mismatch is not None and layout.next_key is not None:
            following = parts[layout.observation_key][1:]
            current = parts[layout.next_key][: following.shape[0]]
            mismatch[a : a + following.shape[0]] = _differs(current, following, atol)
        if keep:
            cache = parts
    return Scan(mismatch=mismatch, non_finite=counts, cache=cache)


_PIECE_BYTES = 1 << 20
"""Bytes of rows per step of the element-wise tests: their temporaries stay this small
(on a whole read block they took more memory than the block itself) and in the CPU cache."""


def _pieces(values: npt.NDArray[Any]) -> range:
    row = max(1, values.dtype.itemsize * int(np.prod(values.shape[1:], dtype=np.int64)))
    return range(0, values.shape[0], max(1, _PIECE_BYTES // row))


def _count_non_finite(values: npt.NDArray[Any]) -> int:
    if values.dtype.kind not in "fc":
        return 0
    step = _pieces(values).step
    finite = sum(
        int(np.count_nonzero(np.isfinite(values[lo : lo + step]))) for lo in _pieces(values)
    )
    return int(values.size - finite)


def _differs(a: npt.NDArray[Any], b: npt.NDArray[Any], atol: float) -> npt.NDArray[np.bool_]:
    """Rows where ``a`` and ``b`` differ by more than ``atol`` (NaN equals NaN)."""
    rows = a.shape[0]
    a2, b2 = a.reshape(rows, -1), b.reshape(rows, -1)
    out = np.zeros(rows, dtype=bool)
    step = _pieces(a2).step
    for lo in _pieces(a2):
        x, y = a2[lo : lo + step], b2[lo : lo + step]
        # most rows are equal bit for bit: only the others need the tolerance test
        unequal = np.flatnonzero(~(x == y).all(axis=1))
        if unequal.size:
            out[lo + unequal] = _differs_within(x[unequal], y[unequal], atol)
    return out


def _differs_within(
    a2: npt.NDArray[Any], b2: npt.NDArray[Any], atol: float
) -> npt.NDArray[np.bool_]:
    if a2.dtype.kind not in "fc" and b2.dtype.kind not in "fc":
        a2, b2 = a2.astype(np.float64), b2.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: equal, caught below
        same = (np.abs(a2 - b2) <= atol) | (a2 == b2) | (np.isnan(a2) & np.isnan(b2))
    return np.asarray(~same.all(axis=1), dtype=bool)


def _warn_about_source(
    log: WarningLog,
    layout: Layout,
    options: D4RLOptions,
    terminals: npt.NDArray[np.bool_],
    ends: npt.NDArray[np.int64],
    scan: Scan,
    split_rule: bool,
) -> None:
    for key, count in scan.non_finite.items():
        if count:
            log.add(
                "non_finite",
                f"{key!r} holds {count} non-finite value(s) (NaN or infinity); they are "
                "imported as they are",
                count,
            )
    if options.profile == "maze2d" and terminals.any():
        rows = np.flatnonzero(terminals)
        log.add(
            "maze2d_terminals",
            f"'terminals' is True at {rows.size} row(s) (first rows {rows[:5].tolist()}); "
            "maze2d terminals carry no meaning and are ignored",
            int(rows.size),
        )
    if scan.mismatch is not None and not split_rule:
        is_end = np.zeros(layout.num_rows, dtype=bool)
        is_end[ends] = True
        unflagged = np.flatnonzero(scan.mismatch & ~is_end)
        if unflagged.size:
            log.add(
                "unflagged_discontinuity",
                f"next_observations[i] != observations[i+1] at {unflagged.size} row(s) that "
                f"end no episode (first rows {unflagged[:5].tolist()}); pass "
                "split_on_next_obs_mismatch=True to end episodes there",
                int(unflagged.size),
            )


def _result(
    path: str,
    layout: Layout,
    options: D4RLOptions,
    episodes: Any,
    plan: Any,
    log: WarningLog,
    metadata: dict[str, Any],
) -> ImportResult:
    kept = plan.kept
    reasons = np.asarray(END_REASONS)[episodes.reason]
    skipped, skip_counts = np.unique(plan.skip[~kept], return_counts=True)
    finals, final_counts = np.unique(plan.final[kept], return_counts=True)
    ended, end_counts = np.unique(reasons[kept], return_counts=True)
    unflagged = np.isin(reasons[kept], ("step_limit", "next_obs_mismatch", "file_end"))
    report = D4RLReport(
        rows_read=layout.num_rows,
        episodes_found=len(episodes),
        episodes_imported=int(kept.sum()),
        episodes_skipped={str(k): int(v) for k, v in zip(skipped, skip_counts, strict=True)},
        transitions=int(plan.transitions[kept].sum()),
        final_transitions_dropped=int((plan.final[kept] == "dropped").sum()),
        final_obs_source={str(k): int(v) for k, v in zip(finals, final_counts, strict=True)},
        flag_counts=flag_counts(plan.terminated[kept], plan.truncated[kept], unflagged),
        warnings=list(log.records),
        fields=field_reports(layout.schema, layout.source_keys),
        end_reasons={str(k): int(v) for k, v in zip(ended, end_counts, strict=True)},
    )
    record = {
        "format": "d4rl",
        "source": source_record(
            path,
            hash_source=options.hash_source,
            metadata=metadata,
            profile=options.profile,
            known_issues=KNOWN_ISSUES[options.profile],
            rows=layout.num_rows,
            next_observations=layout.next_key,
            timeouts=layout.has_timeouts,
            squeezed=layout.squeezed,
        ),
        "alignment": {"source_convention": "action-out", "converted_at_import": True},
        "episodes": {
            "source_episode": np.flatnonzero(kept).tolist(),
            "source_row_start": episodes.start[kept].tolist(),
            "source_rows": episodes.rows[kept].tolist(),
            "end_reason": reasons[kept].tolist(),
            "final_obs_source": plan.final[kept].tolist(),
            "source_terminated": episodes.source_terminated[kept].tolist(),
            "source_truncated": episodes.source_truncated[kept].tolist(),
        },
    }
    return ImportResult(report=report, record=record)
