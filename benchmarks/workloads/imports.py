"""W9: importing a D4RL-shaped and a LeWorldModel-shaped HDF5 file, and a Lance dataset, into Zarr.

The source files are written block by block (bounded memory) like their originals: D4RL
with gzip-compressed columns, LeWM like stable-worldmodel <= 0.0.5 (resizable columns,
pixels Blosc LZ4 in 100-row chunks, the rest in 1000-row chunks). The ceiling is
reading every column of the file once with h5py, chunk-aligned, and discarding it.
Rates are uncompressed source megabytes per second. Each file is also imported at a
quarter of its rows: peak RSS should not grow with the file. The Lance row
(``imports_lance``) compares the import of a stable-worldmodel-shaped Lance dataset with
reading its table alone with pylance.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.results import Figure, WorkloadResult, ratio_target
from benchmarks.workloads._import_rows import ceiling, rss_target, timed_import

if TYPE_CHECKING:
    from pathlib import Path

    from benchmarks.harness import Context

__all__ = ["run_w9", "write_d4rl", "write_lewm"]

_BLOCK = 20_000


def _episode_lengths(rows: int, mean: int, rng: np.random.Generator) -> list[int]:
    lengths: list[int] = []
    while sum(lengths) < rows:
        lengths.append(int(rng.integers(mean // 2, mean + 1)))
    lengths[-1] -= sum(lengths) - rows
    return [n for n in lengths if n > 0]


def write_d4rl(path: Path, rows: int, seed: int) -> None:
    """A hopper-shaped D4RL file: 11-dim observations, 3-dim actions, gzip columns."""
    import h5py

    rng = np.random.default_rng([seed, 9])
    lengths = np.array(_episode_lengths(rows, 1000, rng))
    ends = np.cumsum(lengths) - 1
    terminals = np.zeros(rows, dtype=bool)
    timeouts = np.zeros(rows, dtype=bool)
    full = lengths == lengths.max()
    timeouts[ends[full]] = True
    terminals[ends[~full]] = True
    timeouts[-1], terminals[-1] = True, False
    with h5py.File(path, "w") as handle:
        columns = {
            "observations": (11,),
            "next_observations": (11,),
            "actions": (3,),
            "rewards": (),
            "infos/qpos": (6,),
            "infos/qvel": (6,),
        }
        made = {
            name: handle.create_dataset(
                name, shape=(rows, *shape), dtype=np.float32, compression="gzip"
            )
            for name, shape in columns.items()
        }
        handle.create_dataset("terminals", data=terminals, compression="gzip")
        handle.create_dataset("timeouts", data=timeouts, compression="gzip")
        handle.create_dataset("metadata/algorithm", data=np.bytes_("SAC"))
        successor = rng.standard_normal(11, dtype=np.float32)
        for lo in range(0, rows, _BLOCK):
            hi = min(lo + _BLOCK, rows)
            obs = rng.standard_normal((hi - lo + 1, 11), dtype=np.float32)
            obs[0] = successor  # continue the previous block's trajectory
            successor = obs[-1]
            nxt = obs[1:].copy()
            done = (terminals | timeouts)[lo:hi]
            nxt[done] = rng.standard_normal((int(done.sum()), 11), dtype=np.float32)
            made["observations"][lo:hi] = obs[:-1]
            made["next_observations"][lo:hi] = nxt
            for name in ("actions", "rewards", "infos/qpos", "infos/qvel"):
                shape = (hi - lo, *columns[name])
                made[name][lo:hi] = rng.standard_normal(shape, dtype=np.float32)


def write_lewm(path: Path, rows: int, seed: int, side: int = 64) -> None:
    """A LeWM-shaped (stable-worldmodel) file: 64x64x3 pixels, action, state, flags."""
    import h5py
    import hdf5plugin

    rng = np.random.default_rng([seed, 10])
    lengths = np.array(_episode_lengths(rows, 200, rng), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    first = np.zeros(rows, dtype=bool)
    first[offsets] = True
    last = np.zeros(rows, dtype=bool)
    last[offsets + lengths - 1] = True
    blosc = dict(hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE))
    with h5py.File(path, "w", libver="latest") as handle:
        handle.create_dataset("ep_len", data=lengths)
        handle.create_dataset("ep_offset", data=offsets)
        pixels = handle.create_dataset(
            "pixels",
            shape=(rows, side, side, 3),
            dtype=np.uint8,
            chunks=(min(100, rows), side, side, 3),
            maxshape=(None, side, side, 3),
            **blosc,
        )
        small = {"action": (2,), "state": (4,), "reward": ()}
        made = {
            name: handle.create_dataset(
                name,
                shape=(rows, *shape),
                dtype=np.float32,
                chunks=(min(1000, rows), *shape),
                maxshape=(None, *shape),
            )
            for name, shape in small.items()
        }
        flags = {"chunks": (min(1000, rows),)}
        handle.create_dataset("terminated", data=last & (rng.random(rows) < 0.5), **flags)
        handle.create_dataset("truncated", data=np.zeros(rows, dtype=bool), **flags)
        for lo in range(0, rows, _BLOCK // 4):
            hi = min(lo + _BLOCK // 4, rows)
            frames = rng.integers(0, 8, size=(hi - lo, side, side, 3), dtype=np.uint8)
            frames += np.uint8(120)
            frames[:, side // 4 : side // 2, side // 4 : side // 2] = 250
            pixels[lo:hi] = frames
            for name, shape in small.items():
                values = rng.standard_normal((hi - lo, *shape), dtype=np.float32)
                if name == "action":  # action-out: no action is taken at the last row
                    values[last[lo:hi]] = np.nan
                if name == "reward":  # nothing was earned arriving at the first row
                    values[first[lo:hi]] = np.nan
                made[name][lo:hi] = values


def read_source(path: Path) -> tuple[int, float]:
    """Read every column of an HDF5 file once, chunk-aligned; ``(raw bytes, seconds)``."""
    import h5py
    import hdf5plugin

    del hdf5plugin  # registers Blosc
    began = time.perf_counter()
    total = 0
    with h5py.File(path, "r") as handle:
        columns: list[Any] = []
        handle.visititems(lambda _, node: columns.append(node) if hasattr(node, "dtype") else None)
        for column in columns:
            if column.shape == ():
                column[()]
                continue
            step = max(1, (column.chunks or (_BLOCK,))[0])
            step *= max(1, (4 << 20) // max(1, step * column.dtype.itemsize * _row(column)))
            for lo in range(0, column.shape[0], step):
                total += column[lo : lo + step].nbytes
    return total, time.perf_counter() - began


def _row(column: Any) -> int:
    return int(np.prod(column.shape[1:], dtype=np.int64))


def _imported(importer: str, source: Path, target: Path, **options: Any) -> Any:
    from episodata import import_dataset

    dataset, _ = import_dataset(importer, source, target, **options)
    return dataset


def _check(importer: str, dataset: Any, source: Path) -> None:
    """Episode 0 of the import holds the source's first rows."""
    import h5py

    with h5py.File(source, "r") as handle:
        segment = dataset.episode(0).read()
        if importer == "d4rl":
            length = len(segment.obs)
            want = np.concatenate(
                [handle["observations"][:length], handle["next_observations"][length - 1 : length]]
            )
        else:
            want = handle["pixels"][: int(handle["ep_len"][0])]
        got = np.asarray(segment.all_obs if importer == "d4rl" else segment.all_obs.pixels)
        if not np.array_equal(got, want):
            raise AssertionError(f"{importer}: episode 0 does not hold the source's rows")


def run_w9(context: Context) -> WorkloadResult:
    """W9: import MB/s vs reading the source alone, and the import's peak RSS."""
    from episodata_core import registry

    s = context.sizes
    result = WorkloadResult(
        "W9",
        f"imports to Zarr: D4RL-shaped ({s.d4rl_rows} rows), LeWM-shaped ({s.lewm_rows} rows "
        "of 64x64x3 pixels)",
    )
    specs = [("d4rl", s.d4rl_rows, write_d4rl), ("lewm", s.lewm_rows, write_lewm)]
    for importer, rows, write in specs:
        try:
            registry.get_importer(importer)
        except LookupError:
            result.figures.append(
                Figure(importer, "episodata", "MB/s", status="skipped: importer not installed")
            )
            continue
        peaks: dict[str, float] = {}
        for scale, label in ((1.0, ""), (0.25, " 1/4")):
            count = max(10, int(rows * scale))
            source = context.run_dir / f"{importer}{label.strip().replace('/', '_')}.h5"
            if not source.exists():
                write(source, count, s.seed)
            raw, read_s = read_source(source)
            read = ceiling(f"{importer}{label} h5py read", source, raw, read_s)
            target = context.run_dir / f"{source.stem}.zarr"
            mine = timed_import(
                context,
                f"{importer}{label} import",
                read,
                target,
                partial(_imported, importer, source, target),
                partial(_check, importer, source=source),
            )
            if mine.ok:
                peaks[label] = mine.extra["rss_peak_delta_mb"]
            result.figures += [read, mine]
        result.targets.append(
            ratio_target(result, f"{importer} import", f"{importer} h5py read", 0.5)
        )
        result.targets.append(
            rss_target(
                importer,
                result.figure(f"{importer} import"),
                result.figure(f"{importer} h5py read"),
                note=f"quarter file: {peaks.get(' 1/4', float('nan')):.0f} MiB, "
                f"full: {peaks.get('', float('nan')):.0f} MiB",
            )
        )
    from benchmarks.workloads.imports_lance import lance_rows
    from benchmarks.workloads.lerobot_import import lerobot_rows
    from benchmarks.workloads.minari_import import minari_rows

    minari_rows(context, result)
    lerobot_rows(context, result)
    lance_rows(context, result)
    return result
