"""The LeWM import itself: structure, storage checks, pre-pass, then the write pass.

Order (formats.md §0.2, §2.8): rules 1-4 (``_layout``), rule 5 (``_storage``), the
streamed pre-pass for rules 6-11 (``_scan``), the alignment decision, warnings; only
then the first write (``_write``). Only ``ep_len`` and ``ep_offset`` are read whole.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError
from episodata_core.importing import WarningLog, field_reports, flag_counts, source_record
from episodata_core.transfer import ImportResult
from episodata_lewm._lance import (
    KEPT_WINDOW_BYTES,
    WINDOW_BYTES,
    LanceSource,
    inspect_lance,
    is_lance,
    verify_rows,
)
from episodata_lewm._layout import build_schema, inspect_file, open_file
from episodata_lewm._options import select_episodes
from episodata_lewm._report import LeWMReport
from episodata_lewm._scan import scan_rows, string_widths
from episodata_lewm._storage import check_chunks, check_filters, largest_chunk_bytes
from episodata_lewm._windows import plan_windows, row_runs
from episodata_lewm._write import EpisodeFlags, write_episodes

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_lewm._options import LeWMOptions
    from episodata_lewm._scan import Scan
    from episodata_lewm._windows import Window

__all__ = ["import_file", "read_schema"]

_MIN_CACHE = 64 << 20


class _Prepared:
    """A checked source: layout, selection, windows and storage facts."""

    def __init__(self, handle: Any, path: str, options: LeWMOptions) -> None:
        self.lance = isinstance(handle, LanceSource)
        if isinstance(handle, LanceSource):
            self.layout = layout = inspect_lance(handle, options)
            self.filters: dict[str, Any] = {}
        else:
            self.layout = layout = inspect_file(handle, path, options)
            self.filters = check_filters(handle, path, list(layout.columns))
        names = list(layout.columns)
        self.positions = select_episodes(options.episodes, layout.ep_len.size, path)
        self.offsets = layout.ep_offset[self.positions]
        self.lengths = layout.ep_len[self.positions]
        fields = [layout.columns[name] for name in layout.roles]
        # blocks of an oversized episode follow the chunks of the widest column (pixels)
        widest = max(fields, key=lambda column: column.row_bytes)
        chunk_rows = (handle[widest.name].chunks or (1,))[0]
        budget = options.read_budget_bytes
        if self.lance:
            # Lance reads any row range at full speed, and pylance keeps what it read
            kept = any(c.encoding is not None and not c.image for c in fields)
            budget = min(budget, KEPT_WINDOW_BYTES if kept else WINDOW_BYTES)
        self.windows: list[Window] = plan_windows(
            self.offsets,
            self.lengths,
            row_bytes=sum(c.row_bytes for c in fields),
            budget=budget,
            chunk_rows=chunk_rows,
        )
        if options.check_chunks and not self.lance:
            runs = row_runs(self.windows)
            check_chunks(handle, path, names, runs, options.populated_bytes)
        strings = [n for n in layout.roles if layout.columns[n].vlen_string]
        layout.string_widths = string_widths(handle, layout, self.windows, strings)
        layout.schema = build_schema(layout)


def _open(path: str, options: LeWMOptions, cache_bytes: int | None = None) -> Any:
    """The source at ``path``: a :class:`LanceSource` for a folder, else an h5py file."""
    if is_lance(path):
        return LanceSource(path, options)
    return open_file(path, rdcc_nbytes=cache_bytes)


def read_schema(path: str, options: LeWMOptions) -> DatasetSchema:
    """The schema an import of ``path`` produces; raises on a malformed source."""
    with _open(path, options) as handle:
        return _Prepared(handle, path, options).layout.schema


def import_file(path: str, dataset: Dataset, options: LeWMOptions) -> ImportResult:
    """Validate ``path`` completely, then append its selected episodes to ``dataset``."""
    cache_bytes = None
    if not is_lance(path):
        with open_file(path) as handle:
            names = list(inspect_file(handle, path, options).columns)
            cache_bytes = max(_MIN_CACHE, 2 * largest_chunk_bytes(handle, names))
    # reopen with a chunk cache that holds chunks shared by two windows (formats.md §2.9)
    with _open(path, options, cache_bytes) as handle:
        prepared = _Prepared(handle, path, options)
        layout = prepared.layout
        noun = "dataset" if prepared.lance else "file"
        log = WarningLog(repr(path), package="episodata_lewm", noun=noun)
        for code, message, count in layout.warnings:
            log.add(code, message, count)
        if isinstance(handle, LanceSource) and len(handle.versions) > 1:
            log.add(
                "lance_versions",
                f"the dataset has {len(handle.versions)} versions ({handle.versions[0]} to "
                f"{handle.versions[-1]}); read version {handle.version}"
                + (" (the latest)" if handle.version == handle.versions[-1] else "")
                + "; pass lance_version= to read another",
            )
        full = options.validate_rows == "full"
        scan = scan_rows(
            handle, layout, prepared.windows, prepared.offsets, prepared.lengths, full=full
        )
        alignment, assumed = _alignment(scan, prepared, options.action_alignment, path)
        release = _release(scan, prepared, alignment, options.swm_release)
        if release == "0.1.1":
            log.add("swm_reset_frame_missing", _RELEASE_0_1_1, int(prepared.positions.size))
        if full:
            _enforce(scan, prepared, alignment, release, path, log)
        if isinstance(handle, LanceSource):
            verify_rows(handle, layout, prepared.windows, full=full)
        flags, reasons = _flags(scan, prepared, options.missing_flags)
        log.finish(strict=options.strict)  # the last check before the first write
        write_episodes(
            handle,
            dataset,
            layout,
            prepared.windows,
            prepared.offsets,
            prepared.lengths,
            flags,
            action_in=alignment == "in",
            # what the backend holds while it writes stays small next to the window
            write_bytes=max(1, options.read_budget_bytes // 16),
        )
    result = _result(
        path, prepared, options, scan, flags, reasons, log, alignment, assumed, release
    )
    result.record["source"].update(_lance_source(path, handle, options), swm_release=release)
    return result


_RELEASE_0_1_1 = (
    "written by stable-worldmodel 0.1.1 (its bug #293): every episode lacks its reset "
    "frame, so row 0 holds the observation after the first step, its reward is the first "
    "step's and the last row's action is the first action. Imported as recorded: the reset "
    "observation, the first action and the first reward are lost, so each episode has one "
    "transition less than the env stepped. Pass swm_release='fixed' to read it otherwise"
)


def _lance_source(path: str, handle: Any, options: LeWMOptions) -> dict[str, Any]:
    """What the record's ``source`` says of a Lance folder: bytes and sha256 of its files."""
    if not isinstance(handle, LanceSource):
        return {}
    return {
        "file": os.path.basename(path.rstrip("/")),
        "bytes": handle.nbytes,
        "sha256": handle.sha256() if options.hash_source else None,
        "container": "lance",
        "lance_version": handle.version,
        "lance_versions": len(handle.versions),
    }


def _release(scan: Scan, prepared: _Prepared, alignment: str, option: str) -> str:
    """``"0.1.1"`` when the rows lack the reset frame, else ``"fixed"``.

    0.1.1 (bug #293) never records the reset row: row 0's reward is a real reward and the
    last row's action is finite (the first action, rotated). The fixed writer puts NaN in
    both, and files without a reward column cannot tell.
    """
    if option != "auto":
        return option
    multi = prepared.lengths > 1
    if alignment != "out" or "reward" not in prepared.layout.roles or not multi.any():
        return "fixed"
    if not scan.reward_row0_nan[multi].any() and scan.last_finite[multi].all():
        return "0.1.1"
    return "fixed"


def _alignment(scan: Scan, prepared: _Prepared, option: str, path: str) -> tuple[str, bool]:
    """``("out" | "in", assumed)`` from the option or the NaN rows of ``action``."""
    if option != "auto":
        return option, False
    multi = prepared.lengths > 1  # a one-row episode's only row is first and last
    if not multi.any():
        return "out", True
    if scan.last_nan_all[multi].all():
        return "out", False
    if scan.first_nan_all[multi].all():
        return "in", False
    any_nan = scan.first_nan_any[multi].any() or scan.last_nan_any[multi].any()
    if not any_nan and scan.inner_nan_count == 0:
        return "out", True  # swm writes action-out; PushT-style files have no NaN at all
    raise FormatError(
        f"{path!r}: cannot tell the action alignment: the last-row action is all NaN in "
        f"{int(scan.last_nan_all[multi].sum())} and the first-row action in "
        f"{int(scan.first_nan_all[multi].sum())} of {int(multi.sum())} episodes, and other "
        "NaN actions exist. Pass action_alignment='out' (swm: action[t] taken at row t) or "
        "'in', or fix the file"
    )


def _enforce(
    scan: Scan, prepared: _Prepared, alignment: str, release: str, path: str, log: WarningLog
) -> None:
    """Rules 6-11 from the pre-pass findings: raise, or log the *warn* items."""
    positions, offsets, lengths = prepared.positions, prepared.offsets, prepared.lengths
    multi = lengths > 1
    # rule 8: the only NaN action allowed is on the row the alignment leaves out
    left_in = scan.first_nan_any if alignment == "out" else scan.last_nan_any
    edge_rows = offsets if alignment == "out" else offsets + lengths - 1
    rows = sorted([*scan.inner_nan_rows, *edge_rows[left_in & multi][:5].tolist()])[:5]
    if rows:
        shown = ", ".join(
            f"NaN action at row {r} inside episode {_episode_of(r, positions, offsets)}"
            for r in rows
        )
        count = scan.inner_nan_count + int((left_in & multi).sum())
        raise FormatError(
            f"{path!r}: {count} action row(s) hold NaN where an action was taken ({shown}). "
            f"Only the row the alignment leaves out ({alignment!r}) may be NaN; the file is "
            "damaged, or pass action_alignment= to read it the other way"
        )
    messages = {
        "flag values": "must hold bool or 0/1 values",
        "inner": "is True before the last row of an episode (only row T may end it)",
        "step_idx": "is not 0, 1, ... within each episode",
        "varies": "changes within an episode (it must be constant per episode)",
    }
    bad_rows = dict(scan.bad_rows)
    # 0.1.1 numbers its HDF5 rows from 1 (the first step); its Lance writer renumbers from 0
    if release == "0.1.1" and "step_idx" in bad_rows and "step_idx+1" not in bad_rows:
        del bad_rows["step_idx"]
    bad_rows.pop("step_idx+1", None)
    for kind, bad in bad_rows.items():
        column = kind.split(" ")[-1]
        shown = ", ".join(
            f"row {r} (episode {_episode_of(r, positions, offsets)})" for r in bad[:5]
        )
        raise FormatError(
            f"{path!r}: column {column!r} {messages[kind.rsplit(' ', 1)[0]]}: "
            f"{scan.bad_counts[kind]} row(s), e.g. {shown}. The file is damaged; pass "
            "validate='structure' to import it unchecked"
        )
    if alignment == "out" and "reward" in prepared.layout.roles and release != "0.1.1":
        count = int((~scan.reward_row0_nan & multi).sum())
        if count:
            log.add(
                "reward_row0_not_nan",
                f"reward on the reset row is not NaN in {count} episode(s); swm writes NaN "
                "there and the value is discarded",
                count,
            )
    for name, count in scan.non_finite.items():
        if count:
            log.add("non_finite", f"{name!r} holds {count} non-finite value(s)", count)


def _episode_of(row: int, positions: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]) -> int:
    return int(positions[np.searchsorted(offsets, row, side="right") - 1])


def _flags(scan: Scan, prepared: _Prepared, missing: str) -> tuple[EpisodeFlags, Any]:
    size = prepared.positions.size
    none = np.zeros(size, dtype=bool)
    terminated = scan.flags_last.get("terminated", none)
    truncated = scan.flags_last.get("truncated", none)
    unflagged = ~(terminated | truncated)
    if prepared.layout.flags or missing == "truncated":
        truncated = truncated | unflagged
    reasons = np.where(terminated, "terminated", np.where(unflagged, "unflagged", "truncated"))
    flags = EpisodeFlags(kept=prepared.lengths > 1, terminated=terminated, truncated=truncated)
    return flags, reasons


def _result(
    path: str,
    prepared: _Prepared,
    options: LeWMOptions,
    scan: Scan,
    flags: EpisodeFlags,
    reasons: Any,
    log: WarningLog,
    alignment: str,
    assumed: bool,
    release: str,
) -> ImportResult:
    layout, kept = prepared.layout, flags.kept
    total = int(layout.ep_len.size)
    skipped = {"not_selected": total - int(prepared.positions.size), "empty": int((~kept).sum())}
    # 0.1.1's finite last-row action is a_1, rotated there by the writer: not a dangling one
    dangles = alignment == "out" and release != "0.1.1"
    dangling = scan.last_finite & kept if dangles else np.zeros_like(kept)
    ended, counts = np.unique(reasons[kept], return_counts=True)
    report = LeWMReport(
        rows_read=int(prepared.lengths.sum()),
        episodes_found=total,
        episodes_imported=int(kept.sum()),
        episodes_skipped={k: v for k, v in skipped.items() if v},
        transitions=int((prepared.lengths[kept] - 1).sum()),
        final_obs_source={"last_row": int(kept.sum())} if kept.any() else {},
        flag_counts=flag_counts(
            flags.terminated[kept], flags.truncated[kept], reasons[kept] == "unflagged"
        ),
        warnings=list(log.records),
        fields=field_reports(layout.schema, {s.qualified_key: s.key for s in layout.schema}),
        end_reasons={str(k): int(v) for k, v in zip(ended, counts, strict=True)},
        dangling_actions=int(dangling.sum()),
    )
    episodes: dict[str, list[Any]] = {
        "source_episode": prepared.positions[kept].tolist(),
        "source_episode_id": _column(scan, layout.index_column, kept),
        "source_row_offset": prepared.offsets[kept].tolist(),
        "source_rows": prepared.lengths[kept].tolist(),
        "source_id": _column(scan, layout.id_column, kept),
        "dangling_action": dangling[kept].tolist(),
        "end_reason": reasons[kept].tolist(),
    }
    for name in layout.metadata_columns:
        episodes[name] = _column(scan, name, kept)
    record = {
        "format": "lewm",
        "source": source_record(
            path,
            # a Lance folder is described by its files once the import is done
            hash_source=options.hash_source and not prepared.lance,
            flags_present=list(layout.flags),
            reward_present="reward" in layout.roles,
            index_column=layout.index_column,
            action_alignment=alignment,
            action_alignment_assumed=assumed,
            row_constant_columns=list(layout.metadata_columns),
            filters={k: v for k, v in prepared.filters.items() if v},
        ),
        "alignment": {
            "source_convention": "action-in" if alignment == "in" else "action-out",
            "converted_at_import": True,
        },
        "episodes": episodes,
    }
    return ImportResult(report=report, record=record)


def _column(scan: Scan, name: str | None, kept: npt.NDArray[np.bool_]) -> list[Any]:
    if name is None:
        return [None] * int(kept.sum())
    values = scan.firsts[name][kept]
    return [v.item() if isinstance(v, np.generic) else v for v in values.tolist()]
