"""What a D4RL file holds: keys, row counts, shapes and the resulting schema (§1.1-1.3).

Everything here reads headers, plus whole string info columns to size their ``<U w``
dtype. Every structural ``FormatError`` of formats.md §1.3 is raised here, before any
data is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError, SchemaError
from episodata_core.schema import DatasetSchema, FieldSpec

if TYPE_CHECKING:
    from episodata_d4rl._options import D4RLOptions

__all__ = ["Layout", "inspect_file", "open_file"]

REQUIRED = ("actions", "rewards", "terminals")
FLAT_KEYS = ("rewards", "terminals", "timeouts")


@dataclass
class Layout:
    """The parts of a D4RL file an import uses, and the schema they give."""

    path: str
    num_rows: int
    observation_key: str
    next_key: str | None
    """The successor column when Case A applies, else ``None``."""
    has_timeouts: bool
    infos: dict[str, str]
    """Info field key -> source dataset path."""
    next_name: str = "next_observations"
    terminals_info: bool = False
    """Under antmaze, the validated ``terminals`` flags become the bool info ``terminals``."""
    string_widths: dict[str, int] = field(default_factory=dict)
    squeezed: dict[str, list[int]] = field(default_factory=dict)
    warnings: list[tuple[str, str, int]] = field(default_factory=list)
    info_valid: bool = False
    schema: DatasetSchema = field(default_factory=lambda: DatasetSchema([]))
    source_keys: dict[str, str] = field(default_factory=dict)


def open_file(path: str) -> Any:
    """Open ``path`` read-only with h5py; a non-HDF5 file is a :class:`FormatError`."""
    import h5py

    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path!r}: no such file; pass the path of a D4RL .hdf5 file")
    if not h5py.is_hdf5(path):
        raise FormatError(
            f"{path!r} is not an HDF5 file; the d4rl importer reads the .hdf5 files that "
            "D4RL downloads (observations, actions, rewards, terminals, ...)"
        )
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise FormatError(f"{path!r}: h5py cannot open the file ({err})") from err


def inspect_file(handle: Any, path: str, options: D4RLOptions) -> Layout:
    """Check the structure of an open file and derive the schema (headers only)."""
    obs_key = options.observation_key
    _check_required(handle, path, (obs_key, *REQUIRED))
    num_rows = int(handle[obs_key].shape[0])
    if num_rows == 0:
        raise FormatError(f"{path!r}: {obs_key!r} has 0 rows; the file holds no steps")
    next_name = f"next_{obs_key.rsplit('/', 1)[-1]}"
    if "/" in obs_key:
        next_name = f"{obs_key.rsplit('/', 1)[0]}/{next_name}"
    next_key = next_name if options.use_next_observations and next_name in handle else None
    has_timeouts = "timeouts" in handle
    per_row = [obs_key, *REQUIRED]
    per_row += [key for key in (next_key, "timeouts" if has_timeouts else None) if key]
    for key in per_row[4:]:
        _check_per_row(handle, path, key)
    layout = Layout(path, num_rows, obs_key, next_key, has_timeouts, {}, next_name=next_name)
    layout.infos = _select_infos(handle, path, options, layout)
    layout.terminals_info = options.profile == "antmaze"
    _check_rows(handle, path, num_rows, [*per_row, *layout.infos.values()])
    for key in FLAT_KEYS:
        if key in handle:
            shape = handle[key].shape
            if shape not in ((num_rows,), (num_rows, 1)):
                raise FormatError(
                    f"{path!r}: {key!r} has shape {shape}; expected ({num_rows},) or "
                    f"({num_rows}, 1), one value per row"
                )
            if len(shape) == 2:
                layout.squeezed[key] = list(shape)
    if next_key is not None and handle[next_key].shape != handle[obs_key].shape:
        raise FormatError(
            f"{path!r}: {next_key!r} has shape {handle[next_key].shape} but {obs_key!r} has "
            f"{handle[obs_key].shape}; pass use_next_observations=False to ignore it"
        )
    if options.profile == "generic" and "infos/goal" in handle:
        layout.warnings.append(
            (
                "maze_like_file",
                (
                    "the file has infos/goal, like maze2d and antmaze files; pass "
                    "profile='maze2d' or profile='antmaze' if it is one (formats.md §1.6)"
                ),
                1,
            )
        )
    for source in layout.infos.values():
        if _is_vlen_string(handle[source].dtype):
            values = np.asarray(handle[source].asstr()[()], dtype=str)
            layout.string_widths[source] = max(1, values.dtype.itemsize // 4)
    layout.info_valid = next_key is not None and bool(layout.infos or layout.terminals_info)
    _build_schema(handle, layout, options)
    return layout


def _check_required(handle: Any, path: str, keys: tuple[str, ...]) -> None:
    missing = [key for key in keys if key not in handle]
    if missing:
        present = sorted(handle.keys())
        raise FormatError(
            f"{path!r}: required key(s) {missing} missing (the file has {present}). A D4RL "
            "file needs observations, actions, rewards and terminals; pass observation_key= "
            "if the observations are stored under another name"
        )
    for key in keys:
        _check_per_row(handle, path, key)


def _check_per_row(handle: Any, path: str, key: str) -> None:
    import h5py

    item = handle[key]
    if not isinstance(item, h5py.Dataset):
        raise FormatError(f"{path!r}: {key!r} is a group; expected a per-row array")
    if item.shape is None or len(item.shape) == 0:
        raise FormatError(f"{path!r}: {key!r} is a scalar; expected a per-row array")


def _check_rows(handle: Any, path: str, num_rows: int, keys: list[str]) -> None:
    counts = {key: int(handle[key].shape[0]) for key in dict.fromkeys(keys)}
    if any(count != num_rows for count in counts.values()):
        listed = ", ".join(f"{key}: {count}" for key, count in counts.items())
        raise FormatError(
            f"{path!r}: per-row keys disagree on the number of rows ({listed}); every "
            f"per-row key needs {num_rows} rows, as {keys[0]!r} has. The file is damaged "
            "or was cut inconsistently"
        )


def _is_vlen_string(dtype: np.dtype[Any]) -> bool:
    import h5py

    info = h5py.check_string_dtype(dtype)
    return info is not None and info.length is None


def _supported(dtype: np.dtype[Any]) -> bool:
    if _is_vlen_string(dtype):
        return True
    return dtype.kind in "biufcSU" and dtype.fields is None


def _select_infos(handle: Any, path: str, options: D4RLOptions, layout: Layout) -> dict[str, str]:
    import h5py

    available: dict[str, str] = {}
    group = handle.get("infos")
    if isinstance(group, h5py.Group) and options.infos is not False:

        def visit(name: str, item: Any) -> None:
            if isinstance(item, h5py.Dataset) and f"infos/{name}" != layout.observation_key:
                available[name] = f"infos/{name}"

        group.visititems(visit)
    chosen: dict[str, str] = {}
    if isinstance(options.infos, list):
        for name in options.infos:
            matches = [k for k in available if k == name or k.startswith(name + "/")]
            if not matches:
                raise FormatError(
                    f"{path!r}: infos={options.infos!r} names {name!r}, which is not below "
                    f"infos/ (available: {sorted(available)})"
                )
            chosen.update({k: available[k] for k in matches})
    elif options.infos:
        chosen = dict(available)
    for key, source in list(chosen.items()):
        _check_per_row(handle, path, source)
        if not _supported(handle[source].dtype):
            if isinstance(options.infos, list):
                raise FormatError(
                    f"{path!r}: {source!r} has dtype {handle[source].dtype}, which a field "
                    "cannot store; leave it out of infos="
                )
            layout.warnings.append(
                ("ignored_key", f"{source!r} (dtype {handle[source].dtype}) was skipped", 1)
            )
            del chosen[key]
    for key, source in _extra_keys(handle, options, layout).items():
        if key in chosen:
            raise FormatError(
                f"{path!r}: top-level {key!r} and {chosen[key]!r} would both be info field "
                f"{key!r}; pass extra_keys='ignore' or select infos=[...]"
            )
        chosen[key] = source
    return chosen


def _extra_keys(handle: Any, options: D4RLOptions, layout: Layout) -> dict[str, str]:
    import h5py

    known = {layout.observation_key, layout.next_name, *REQUIRED, "timeouts"}
    extras: dict[str, str] = {}
    for key, item in handle.items():
        if key in known or (key in ("infos", "metadata") and isinstance(item, h5py.Group)):
            continue
        is_row_array = (
            isinstance(item, h5py.Dataset)
            and item.shape is not None
            and len(item.shape) >= 1
            and item.shape[0] == layout.num_rows
            and _supported(item.dtype)
        )
        if not is_row_array:
            what = "group" if isinstance(item, h5py.Group) else f"dataset {item.shape}"
            layout.warnings.append(
                ("ignored_key", f"top-level {what} {key!r} is not a per-row array; skipped", 1)
            )
        elif options.extra_keys == "info":
            extras[key] = key
            layout.warnings.append(
                (
                    "extra_key",
                    (
                        f"unknown top-level array {key!r} was imported as info field {key!r}; "
                        "pass extra_keys='ignore' to leave it out"
                    ),
                    1,
                )
            )
    return extras


def _build_schema(handle: Any, layout: Layout, options: D4RLOptions) -> None:
    names = options.field_names
    obs = handle[layout.observation_key]
    actions = handle["actions"]
    rewards = handle["rewards"]
    specs = [
        FieldSpec(names.observation, shape=obs.shape[1:], dtype=obs.dtype, role="observation"),
        FieldSpec(names.action, shape=actions.shape[1:], dtype=actions.dtype, role="action"),
        FieldSpec(names.reward, shape=(), dtype=rewards.dtype, role="reward"),
    ]
    sources = {
        specs[0].qualified_key: layout.observation_key,
        specs[1].qualified_key: "actions",
        specs[2].qualified_key: "rewards",
    }
    for key, source in layout.infos.items():
        dset = handle[source]
        width = layout.string_widths.get(source)
        dtype = f"<U{width}" if width is not None else dset.dtype
        specs.append(FieldSpec(key, shape=dset.shape[1:], dtype=dtype, role="info"))
        sources[specs[-1].qualified_key] = source
    if layout.terminals_info:
        specs.append(FieldSpec("terminals", shape=(), dtype="bool", role="info"))
        sources["info/terminals"] = "terminals"
    if layout.info_valid:
        specs.append(FieldSpec("info_valid", shape=(), dtype="bool", role="info"))
        sources["info/info_valid"] = ""
    try:
        layout.schema = DatasetSchema(specs)
    except SchemaError as err:
        raise FormatError(
            f"{layout.path!r}: the fields collide ({err}); choose other field_names=, "
            "select infos=[...] or pass extra_keys='ignore'"
        ) from err
    layout.source_keys = sources
