"""Opening an untrusted offset-segment archive (formats.md §3.10, steps 1-3).

Order matters: ``SHA256SUMS`` is checked first (every listed file, every path), then the
manifests are validated and cross-checked, and only then are segment files opened, each
member's ``.npy`` header compared with the manifest before its data is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core import location
from episodata_core.errors import FormatError, IntegrityError
from episodata_core.transfer import ImportWarningRecord
from episodata_segments._checksums import ChecksumReport, check_relative_path, verify_sha256sums
from episodata_segments._layout import SCALAR_NAMES
from episodata_segments._manifest import (
    LABEL_PATTERN,
    ArchiveManifest,
    EnvironmentEntry,
    SegmentRow,
    parse_manifest,
    parse_rows,
)
from episodata_segments._npz import MemberHeader, content_sha256, read_npz

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["Archive", "load_segment", "open_archive"]

MANIFEST_NAME = "manifest.json"
ROWS_NAME = "manifest.jsonl"
_PATH = re.compile(r"episodes/([a-z0-9][a-z0-9_-]*)/episode_([0-9]{3,})\.npz")
_SCALAR_KINDS = {
    "env": "U",
    "goal_step": "i",
    "offset": "i",
    "source_episode": "i",
    "start_step": "i",
}


@dataclass
class Archive:
    """A checked archive: its manifest and the rows of the selected environments."""

    root: Path
    manifest: ArchiveManifest
    rows: list[SegmentRow]
    envs: list[str]
    checksums: ChecksumReport | None
    warnings: list[ImportWarningRecord] = field(default_factory=list)

    @property
    def offset(self) -> int:
        """K."""
        return self.manifest.offset

    def headers(self, env: str) -> dict[str, MemberHeader]:
        """Shape and dtype every member of ``env``'s files must declare."""
        entry = self.manifest.environments[env]
        headers: dict[str, MemberHeader] = {
            name: ((f.rows, *f.shape), np.dtype(f.dtype)) for name, f in entry.fields.items()
        }
        headers.update({name: ((), np.dtype(s.dtype)) for name, s in entry.scalars.items()})
        return headers


def open_archive(source: str, envs: list[str] | None, *, verify: bool) -> Archive:
    """Verify ``SHA256SUMS`` (when ``verify``), then parse and cross-check both manifests."""
    root = Path(location.normalize(source))
    if not root.is_dir():
        raise FormatError(
            f"{str(root)!r} is not a folder; an offset-segment archive is a folder holding "
            "manifest.json, manifest.jsonl, SHA256SUMS and episodes/"
        )
    checksums = verify_sha256sums(root) if verify else None
    warnings: list[ImportWarningRecord] = []
    if checksums is not None:
        for required in (MANIFEST_NAME, ROWS_NAME):
            if required not in checksums.listed:
                raise IntegrityError(
                    f"{required} is not listed in SHA256SUMS, so it cannot be trusted; the "
                    "archive is incomplete or was modified"
                )
        if checksums.unlisted:
            shown = ", ".join(repr(p) for p in checksums.unlisted[:5])
            warnings.append(
                ImportWarningRecord(
                    code="unlisted_file",
                    message=(
                        f"files not listed in SHA256SUMS are ignored: {shown}"
                        + (" ..." if len(checksums.unlisted) > 5 else "")
                    ),
                    count=len(checksums.unlisted),
                )
            )
    manifest = parse_manifest(_read(root, MANIFEST_NAME), MANIFEST_NAME)
    rows = parse_rows(_read(root, ROWS_NAME), ROWS_NAME)
    _check_manifest(manifest)
    _check_rows(manifest, rows, checksums)
    selected = list(manifest.env_order) if envs is None else list(dict.fromkeys(envs))
    unknown = [env for env in selected if env not in manifest.environments]
    if unknown:
        raise FormatError(
            f"envs={envs!r}: {unknown} are not in the archive (it has {manifest.env_order})"
        )
    order = {env: i for i, env in enumerate(manifest.env_order)}
    selected.sort(key=order.__getitem__)
    chosen = [row for row in rows if row.env in set(selected)]
    return Archive(root, manifest, chosen, selected, checksums, warnings)


def _read(root: Path, name: str) -> bytes:
    path = check_relative_path(root, name, name)
    if not path.is_file():
        raise FormatError(f"{str(root)!r} has no {name}; it is not an offset-segment archive")
    return path.read_bytes()


def _check_manifest(manifest: ArchiveManifest) -> None:
    k = manifest.offset
    where = MANIFEST_NAME
    if (manifest.n_observations, manifest.n_actions) != (k + 1, k):
        raise FormatError(
            f"{where}: n_observations/n_actions are {manifest.n_observations}/"
            f"{manifest.n_actions}, but offset {k} needs {k + 1}/{k}"
        )
    labels = manifest.env_order
    if labels != sorted(set(labels)) or set(labels) != set(manifest.environments) or not labels:
        raise FormatError(f"{where}: env_order {labels} must list every environment once, sorted")
    if manifest.segments_total != manifest.episodes_per_env * len(labels):
        raise FormatError(
            f"{where}: segments_total {manifest.segments_total} != episodes_per_env "
            f"{manifest.episodes_per_env} x {len(labels)} environments"
        )
    for label in labels:
        if not LABEL_PATTERN.fullmatch(label):
            raise FormatError(f"{where}: environment label {label!r} is not allowed")
        _check_environment(label, manifest.environments[label], manifest)


def _check_environment(label: str, env: EnvironmentEntry, manifest: ArchiveManifest) -> None:
    where = f"{MANIFEST_NAME}, environments[{label!r}]"
    k = manifest.offset
    if set(env.scalars) != set(SCALAR_NAMES):
        raise FormatError(f"{where}: scalars {sorted(env.scalars)} != {list(SCALAR_NAMES)}")
    for name, scalar in env.scalars.items():
        if np.dtype(scalar.dtype).kind != _SCALAR_KINDS[name]:
            raise FormatError(f"{where}: scalar {name!r} has dtype {scalar.dtype}")
    for name, entry in env.fields.items():
        if name in env.scalars or not name or any(not part for part in name.split("/")):
            raise FormatError(f"{where}: member name {name!r} is not allowed")
        want = k if entry.role == "action" else k + 1
        if entry.rows != want:
            raise FormatError(
                f"{where}: member {name!r} ({entry.role}) has {entry.rows} rows; offset {k} "
                f"needs {want}"
            )
        if entry.role == "flag" and (
            name not in ("terminated", "truncated") or entry.dtype != "|b1"
        ):
            raise FormatError(f"{where}: flag member {name!r} must be terminated/truncated, bool")
    if "segment_step_idx" not in env.fields:
        raise FormatError(f"{where}: member 'segment_step_idx' is missing")
    if not any(f.role == "observation" for f in env.fields.values()):
        raise FormatError(f"{where}: no observation-role member; nothing to import")
    if len(env.segments) != manifest.episodes_per_env:
        raise FormatError(
            f"{where}: {len(env.segments)} segments listed, episodes_per_env is "
            f"{manifest.episodes_per_env}"
        )


def _check_rows(
    manifest: ArchiveManifest, rows: list[SegmentRow], checksums: ChecksumReport | None
) -> None:
    where = ROWS_NAME
    if len(rows) != manifest.segments_total:
        raise FormatError(
            f"{where}: {len(rows)} lines, but manifest.json says segments_total="
            f"{manifest.segments_total}; the manifests disagree"
        )
    seen: set[str] = set()
    expected: list[tuple[str, int]] = [
        (label, j) for label in manifest.env_order for j in range(manifest.episodes_per_env)
    ]
    k = manifest.offset
    for number, (row, (label, index)) in enumerate(zip(rows, expected, strict=True), start=1):
        line = f"{where} line {number}"
        if row.segment_id in seen:
            raise FormatError(f"{line}: segment_id {row.segment_id!r} appears twice")
        seen.add(row.segment_id)
        if (row.env, row.index) != (label, index):
            raise FormatError(
                f"{line}: expected segment {index} of {label!r} (lines follow env_order, then "
                f"draw order), found {row.index} of {row.env!r}"
            )
        match = _PATH.fullmatch(row.path)
        if match is None or match.group(1) != row.env or int(match.group(2)) != row.index:
            raise FormatError(
                f"{line}: path {row.path!r} is not episodes/<env>/episode_<index>.npz"
            )
        if checksums is not None and row.path not in checksums.listed:
            raise IntegrityError(f"{line}: {row.path!r} is not listed in SHA256SUMS")
        if (row.offset, row.n_observations, row.n_actions) != (k, k + 1, k) or (
            row.goal_step != row.start_step + k or row.goal_step > row.source_transitions
        ):
            raise FormatError(
                f"{line}: offset/start/goal/counts ({row.offset}, {row.start_step}, "
                f"{row.goal_step}, {row.n_observations}, {row.n_actions}) do not fit offset {k} "
                f"within {row.source_transitions} transitions"
            )
        entry = manifest.environments[label].segments[index]
        mine = (row.segment_id, row.source_episode, row.start_step, row.goal_step, row.path)
        if (
            entry.segment_id,
            entry.source_episode,
            entry.start_step,
            entry.goal_step,
            entry.path,
        ) != mine or (entry.content_sha256 != row.content_sha256):
            raise FormatError(f"{line}: {row.segment_id!r} disagrees with manifest.json")


def load_segment(archive: Archive, row: SegmentRow, *, verify: bool) -> dict[str, npt.NDArray[Any]]:
    """Load one segment file: headers first, then data, then hash and count checks."""
    path = check_relative_path(archive.root, row.path, row.segment_id)
    if not path.is_file():
        raise IntegrityError(f"{row.path!r} ({row.segment_id}) is missing from the archive")
    where = row.path
    arrays = read_npz(str(path), archive.headers(row.env), where)
    if verify and content_sha256(arrays) != row.content_sha256:
        raise IntegrityError(
            f"{where}: content_sha256 does not match manifest.jsonl; the segment was modified"
        )
    k = archive.offset
    steps = np.arange(k + 1, dtype=np.int64)
    if not np.array_equal(arrays["segment_step_idx"], steps):
        raise FormatError(f"{where}: segment_step_idx is not 0..{k}")
    if "step_idx" in arrays and not np.array_equal(arrays["step_idx"], row.start_step + steps):
        raise FormatError(f"{where}: step_idx is not start_step + 0..{k}")
    scalars = {
        "env": row.env,
        "source_episode": row.source_episode,
        "start_step": row.start_step,
        "goal_step": row.goal_step,
        "offset": k,
    }
    for name, value in scalars.items():
        if arrays[name].item() != value:
            raise FormatError(
                f"{where}: scalar {name!r} is {arrays[name]!r}, manifest says {value!r}"
            )
    for flag in ("terminated", "truncated"):
        if flag in arrays and arrays[flag][:k].any():
            raise FormatError(f"{where}: {flag} is True before the goal row {k}")
    return arrays
