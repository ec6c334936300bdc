"""What ``main_data.hdf5`` holds: episodes, per-row leaves, row counts, the schema.

Everything here reads headers, plus the string columns to size their ``<U w`` dtype and,
with ``decode_images=False``, the JPEG columns to size their byte rows. Every structural
``FormatError`` (docs/minari.md, "What is checked") is raised here, before any data is
read: the episode count, row counts, ``total_steps``, the same leaves in every episode,
and the stored shapes against the spaces of ``metadata.json``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from episodata_core.errors import FormatError, SchemaError
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_minari._images import image_paths, jpeg_lengths, jpeg_shape, require_pillow
from episodata_minari._source import described

if TYPE_CHECKING:
    from episodata_minari._options import MinariOptions
    from episodata_minari._source import MinariSource, SpaceLeaf

__all__ = ["EpisodeEntry", "Layout", "Leaf", "field_key", "inspect_file", "open_file"]

REQUIRED = ("observations", "actions", "rewards", "terminations", "truncations")
FLAT = ("rewards", "terminations", "truncations")
FLAGS = ("terminations", "truncations")
ROW_OFFSET = {"observation": 1, "action": 0, "info": 1}
"""Rows of a leaf of each role, minus T: observations and infos hold the reset row too."""
ROLE_GROUPS = {"observation": "observations", "action": "actions", "info": "infos"}
SHOWN = 5

_INDEX = re.compile(r"_index_(\d+)")
_EPISODE = re.compile(r"episode_(\d+)")

LeafKind = Literal["array", "string", "jpeg", "jpeg_bytes"]


@dataclass(frozen=True)
class Leaf:
    """One per-row dataset of every episode and the field it becomes."""

    role: str
    source: str
    """Path inside an episode group, e.g. ``observations/pos``."""
    key: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    kind: LeafKind = "array"
    """``string``: vlen strings read as ``<U w``; ``jpeg``: JPEG bytes decoded to ``shape``;
    ``jpeg_bytes``: JPEG bytes kept, zero-padded to ``shape`` = ``(L,)``."""
    stored_shape: tuple[int, ...] = ()
    layout: str | None = None
    low: float | list[Any] | None = None
    high: float | list[Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeEntry:
    """One ``episode_{id}`` group."""

    name: str
    id: int
    seed: int | None
    steps: int


@dataclass
class Layout:
    """The parts of a Minari dataset an import uses, and the schema they give."""

    source: MinariSource
    episodes: list[EpisodeEntry]
    leaves: list[Leaf]
    reward_dtype: np.dtype[Any]
    warnings: list[tuple[str, str, int]] = field(default_factory=list)
    schema: DatasetSchema = field(default_factory=lambda: DatasetSchema([]))
    source_keys: dict[str, str] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Observation rows of all episodes, Σ(T + 1)."""
        return sum(entry.steps + 1 for entry in self.episodes)


def open_file(source: MinariSource) -> Any:
    """Open ``main_data.hdf5`` read-only; a non-HDF5 file is a :class:`FormatError`."""
    import h5py

    path = str(source.hdf5_path)
    if not h5py.is_hdf5(path):
        raise FormatError(f"{source.given!r}: {path!r} is not an HDF5 file; the file is damaged")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise FormatError(f"{source.given!r}: h5py cannot open {path!r} ({err})") from err


def field_key(path: str) -> str:
    """The field key of a leaf path below its role group: ``_index_<k>`` becomes ``<k>``."""
    return "/".join(
        match.group(1) if (match := _INDEX.fullmatch(part)) else part for part in path.split("/")
    )


def inspect_file(handle: Any, source: MinariSource, options: MinariOptions) -> Layout:
    """Check the structure of an open ``main_data.hdf5`` and derive the schema."""
    where = repr(source.given)
    warnings: list[tuple[str, str, int]] = []
    names = _episode_names(handle, where, warnings)
    if len(names) != source.total_episodes:
        raise FormatError(
            f"{where}: main_data.hdf5 holds {len(names)} episode groups but metadata.json "
            f"says total_episodes = {source.total_episodes}; the dataset is incomplete or "
            "was changed after it was written"
        )
    if not names:
        raise FormatError(f"{where}: main_data.hdf5 holds no episodes")
    images = image_paths(source)
    entries: list[EpisodeEntry] = []
    reference: dict[str, tuple[str, tuple[int, ...], str]] = {}
    problems: list[str] = []
    for name, episode_id in names:
        group = handle[name]
        entry = _entry(group, name, episode_id, where)
        datasets = _datasets(group, name, where, options, warnings if not entries else None)
        signature = {
            path: _signature(dataset, path in images) for path, dataset in datasets.items()
        }
        for key in FLAGS:  # flags become bool whatever their stored dtype
            signature[key] = ("flag", signature[key][1], "flag")
        if not entries:
            reference = signature
        elif signature != reference:
            raise FormatError(f"{where}: {_difference(name, signature, reference)}")
        rows = _row_problems(datasets, entry.steps)
        if rows:
            problems.append(f"{name} (T = {entry.steps}): {', '.join(rows)}")
        entries.append(entry)
    if problems:
        raise FormatError(
            f"{where}: row counts disagree with the episodes' total_steps T (observations "
            "and infos need T + 1 rows, actions, rewards and flags T): "
            + "; ".join(problems[:SHOWN])
            + (f"; and {len(problems) - SHOWN} more episode(s)" if len(problems) > SHOWN else "")
        )
    steps = sum(entry.steps for entry in entries)
    if steps != source.total_steps:
        raise FormatError(
            f"{where}: the episodes hold {steps} steps in all but metadata.json says "
            f"total_steps = {source.total_steps}; the dataset is incomplete or was changed "
            "after it was written"
        )
    first = handle[names[0][0]]
    for key in FLAT:  # the flags' values are checked before the first write
        if first[key].dtype.kind not in "biuf":
            raise FormatError(
                f"{where}: {key} has dtype {first[key].dtype}; expected "
                + ("a number" if key == "rewards" else "bool or 0/1")
            )
    leaves = _leaves(first, source, options, reference)
    widths = _string_widths(handle, entries, leaves)
    lengths = jpeg_lengths(handle, entries, leaves, where)
    leaves = [
        replace(leaf, dtype=np.dtype(f"<U{widths[leaf.source]}"))
        if leaf.kind == "string"
        else replace(leaf, shape=(lengths[leaf.source],))
        if leaf.kind == "jpeg_bytes"
        else leaf
        for leaf in leaves
    ]
    layout = Layout(source, entries, leaves, first["rewards"].dtype, warnings)
    _build_schema(layout, options)
    return layout


def _episode_names(
    handle: Any, where: str, warnings: list[tuple[str, str, int]]
) -> list[tuple[str, int]]:
    import h5py

    names = []
    for name, item in handle.items():
        match = _EPISODE.fullmatch(name)
        if match and isinstance(item, h5py.Group):
            names.append((name, int(match.group(1))))
        else:
            warnings.append(
                ("ignored_key", f"top-level {name!r} is not an episode_<id> group; skipped", 1)
            )
    # HDF5 lists names alphabetically unless the file tracks creation order: episode_10
    # would come before episode_2, so sort by id
    return sorted(names, key=lambda pair: pair[1])


def _entry(group: Any, name: str, episode_id: int, where: str) -> EpisodeEntry:
    import h5py

    missing = [key for key in REQUIRED if key not in group]
    if missing:
        raise FormatError(
            f"{where}: {name} lacks {missing} (it has {sorted(group.keys())}); every Minari "
            f"episode holds {list(REQUIRED)}"
        )
    for key in FLAT:
        if not isinstance(group[key], h5py.Dataset) or group[key].ndim == 0:
            raise FormatError(f"{where}: {name}/{key} is not a per-step array")
    steps = group.attrs.get("total_steps")
    if isinstance(steps, np.integer | int) and not isinstance(steps, bool | np.bool_):
        total = int(steps)
    else:  # the attribute is optional to us: the rewards give T as well
        total = int(group["rewards"].shape[0])
    seed = group.attrs.get("seed")
    has_seed = isinstance(seed, np.integer | int) and not isinstance(seed, bool | np.bool_)
    return EpisodeEntry(name, episode_id, int(seed) if has_seed else None, total)


def _datasets(
    group: Any,
    name: str,
    where: str,
    options: MinariOptions,
    warnings: list[tuple[str, str, int]] | None,
) -> dict[str, Any]:
    """``{path: h5py.Dataset}`` of the selected leaves of one episode, in field order."""
    found: dict[str, Any] = {}
    for role_group in ("observations", "actions"):
        _walk(group[role_group], role_group, found)
    found.update({key: group[key] for key in FLAT})
    infos: dict[str, Any] = {}
    if "infos" in group and options.infos is not False:
        _walk(group["infos"], "infos", infos)
    if isinstance(options.infos, list):
        chosen: dict[str, Any] = {}
        for wanted in options.infos:
            matches = {
                path: d
                for path, d in infos.items()
                if path == f"infos/{wanted}" or path.startswith(f"infos/{wanted}/")
            }
            if not matches:
                available = [path.removeprefix("infos/") for path in infos]
                raise FormatError(
                    f"{where}: infos={options.infos!r} names {wanted!r}, which {name} does not "
                    f"hold below infos/ (it has {available})"
                )
            chosen.update(matches)
        infos = chosen
    for path, dataset in list(infos.items()):
        if _signature(dataset)[0] in ("vlen", "unsupported"):
            if isinstance(options.infos, list):
                raise FormatError(
                    f"{where}: {name}/{path} has dtype {dataset.dtype}, which a field cannot "
                    "store; leave it out of infos="
                )
            del infos[path]
            if warnings is not None:
                message = f"{path!r} (dtype {dataset.dtype}) cannot be a field; skipped"
                warnings.append(("ignored_key", message, 1))
    found.update(infos)
    return found


def _walk(item: Any, path: str, out: dict[str, Any]) -> None:
    import h5py

    if isinstance(item, h5py.Dataset):
        out[path] = item
    elif isinstance(item, h5py.Group):
        for name in sorted(item.keys(), key=_child_order):
            _walk(item[name], f"{path}/{name}", out)


def _child_order(name: str) -> tuple[int, int, str]:
    # Tuple members in index order (_index_10 after _index_9), Dict keys by name
    match = _INDEX.fullmatch(name)
    return (0, int(match.group(1)), "") if match else (1, 0, name)


def _signature(dataset: Any, image: bool = False) -> tuple[str, tuple[int, ...], str]:
    """``(kind, per-row shape, dtype)`` of a stored leaf; kinds as in :class:`Leaf`.

    Zero-padded JPEG bytes of an ``image`` leaf have a length per episode: it shows as -1.
    """
    import h5py

    dtype = dataset.dtype
    row = tuple(int(n) for n in dataset.shape[1:]) if dataset.ndim else ()
    if image and dtype == np.uint8 and len(row) == 1:
        row = (-1,)
    text = h5py.check_string_dtype(dtype)
    if text is not None and text.length is None:
        return "string", row, "vlen str"
    base = h5py.check_vlen_dtype(dtype)
    if base is not None:
        return "vlen", row, f"vlen {np.dtype(base)}"
    if dtype.kind in "biufcSU" and dtype.fields is None and dtype.subdtype is None:
        return "array", row, str(dtype)
    return "unsupported", row, str(dtype)


def _difference(
    name: str,
    signature: dict[str, tuple[str, tuple[int, ...], str]],
    reference: dict[str, tuple[str, tuple[int, ...], str]],
) -> str:
    missing = [path for path in reference if path not in signature]
    extra = [path for path in signature if path not in reference]
    changed = [
        f"{path} {signature[path][2]}{list(signature[path][1])} (first episode: "
        f"{reference[path][2]}{list(reference[path][1])})"
        for path in signature
        if path in reference and signature[path] != reference[path]
    ]
    parts = [f"lacks {missing}"] * bool(missing) + [f"adds {extra}"] * bool(extra)
    parts += [f"differs in {', '.join(changed)}"] * bool(changed)
    differing = signature.keys() ^ reference.keys()
    differing |= {p for p in signature if p in reference and signature[p] != reference[p]}
    hint = ". Select common infos with infos=[...] or pass infos=False"
    return (
        f"{name} {'; '.join(parts)}: every episode needs the same leaves with the same per-step "
        "shapes and dtypes" + (hint if any(p.startswith("infos") for p in differing) else "")
    )


def _row_problems(datasets: dict[str, Any], steps: int) -> list[str]:
    problems = []
    for path, dataset in datasets.items():
        group = path.split("/")[0]
        role = next((r for r, g in ROLE_GROUPS.items() if g == group), None)
        expected = steps + (ROW_OFFSET[role] if role is not None else 0)
        if dataset.ndim == 0:
            problems.append(f"{path} is a scalar")
        elif int(dataset.shape[0]) != expected:
            problems.append(f"{path}: {int(dataset.shape[0])} rows (expected {expected})")
        elif path in FLAT and dataset.shape[1:] not in ((), (1,)):
            problems.append(f"{path} has shape {dataset.shape}; expected ({steps},)")
    return problems


def _leaves(
    first: Any,
    source: MinariSource,
    options: MinariOptions,
    signature: dict[str, tuple[str, tuple[int, ...], str]],
) -> list[Leaf]:
    """The fields of the leaves, checked against the spaces of ``metadata.json``."""
    where = repr(source.given)
    leaves: list[Leaf] = []
    spaces = {"observation": source.observation_space, "action": source.action_space}
    names = {"observation": options.field_names.observation, "action": options.field_names.action}
    for role, group_name in ROLE_GROUPS.items():
        prefix = f"{group_name}/"
        stored = {
            path.removeprefix(group_name).removeprefix("/"): info
            for path, info in signature.items()
            if path == group_name or path.startswith(prefix)
        }
        space = spaces.get(role)
        if space is not None:
            _check_paths(where, group_name, space, stored)
        for relative, (kind, row, dtype_text) in stored.items():
            path = f"{group_name}/{relative}" if relative else group_name
            key = field_key(relative) if relative else names.get(role, group_name)
            dtype = first[path].dtype
            leaf_space = space.get(relative) if space is not None else None
            if kind == "string":
                leaves.append(Leaf(role, path, key, row, dtype, "string", row))
            elif (image := jpeg_shape(leaf_space, kind, row, dtype_text, role)) is not None:
                uint8 = np.dtype(np.uint8)
                if options.decode_images:
                    require_pillow(where, path, dtype_text, image)
                    bounds = described(leaf_space, image)
                    leaves.append(Leaf(role, path, key, image, uint8, "jpeg", row, **bounds))
                else:  # the length L is the longest image's, found by jpeg_lengths
                    kept = {"encoding": "jpeg", "image_shape": list(image)}
                    leaves.append(
                        Leaf(role, path, key, (0,), uint8, "jpeg_bytes", row, metadata=kept)
                    )
            elif kind == "array":
                _check_leaf(where, path, row, leaf_space)
                bounds = described(leaf_space, row)
                leaves.append(Leaf(role, path, key, row, dtype, "array", row, **bounds))
            else:
                raise FormatError(
                    f"{where}: {path} has dtype {dtype_text}, which a field cannot store"
                    + (
                        "; without observation_space in metadata.json JPEG-encoded images "
                        "cannot be recognised"
                        if dtype_text == "vlen uint8" and leaf_space is None
                        else ""
                    )
                )
    return leaves


def _check_paths(
    where: str, group_name: str, space: dict[str, SpaceLeaf], stored: dict[str, Any]
) -> None:
    if set(space) == set(stored):
        return
    shown = {f"{group_name}/{p}" if p else group_name for p in stored}
    wanted = {f"{group_name}/{p}" if p else group_name for p in space}
    raise FormatError(
        f"{where}: the episodes hold {sorted(shown)} but the space in metadata.json has "
        f"{sorted(wanted)}; the dataset does not match its metadata"
    )


def _check_leaf(where: str, path: str, row: tuple[int, ...], space: SpaceLeaf | None) -> None:
    if space is None or space.shape is None or row == space.shape:
        return
    raise FormatError(
        f"{where}: {path} stores per-step shape {row} but its {space.kind} space in "
        f"metadata.json has shape {space.shape}; the dataset does not match its metadata"
    )


def _string_widths(handle: Any, entries: list[EpisodeEntry], leaves: list[Leaf]) -> dict[str, int]:
    """The ``<U w`` width of each string leaf: its longest value in any episode."""
    widths: dict[str, int] = {}
    for leaf in leaves:
        if leaf.kind != "string":
            continue
        width = 1
        for entry in entries:
            values = np.asarray(handle[entry.name][leaf.source].asstr()[()], dtype=str)
            width = max(width, values.dtype.itemsize // 4)
        widths[leaf.source] = width
    return widths


def _spec(leaf: Leaf) -> FieldSpec:
    return FieldSpec(
        leaf.key,
        shape=leaf.shape,
        dtype=leaf.dtype,
        role=leaf.role,
        layout=leaf.layout,
        low=leaf.low,
        high=leaf.high,
        metadata=leaf.metadata,
    )


def _build_schema(layout: Layout, options: MinariOptions) -> None:
    specs = [_spec(leaf) for leaf in layout.leaves if leaf.role != "info"]
    specs.append(
        FieldSpec(options.field_names.reward, shape=(), dtype=layout.reward_dtype, role="reward")
    )
    specs += [_spec(leaf) for leaf in layout.leaves if leaf.role == "info"]
    sources = {f"{leaf.role}/{leaf.key}": leaf.source for leaf in layout.leaves}
    sources[f"reward/{options.field_names.reward}"] = "rewards"
    try:
        layout.schema = DatasetSchema(specs)
    except SchemaError as err:
        raise FormatError(
            f"{layout.source.given!r}: the fields collide ({err}); choose other field_names= "
            "or select infos=[...]"
        ) from err
    layout.source_keys = sources
