"""The peers a user would pick instead: TorchRL replay buffers and an h5py segment reader.

TorchRL gets the same rows as episodata plus an ``episode`` column for ``traj_key``; its
``SliceSampler`` draws ``L + 1`` consecutive rows (the ``L + 1`` observations of ``L``
transitions, what episodata reads) with ``cache_values=True``, which TorchRL recommends
for static data and which it clears itself on every write. The h5py reader is written
the way world-model repositories write it: episodes concatenated in one file with
``ep_len``/``ep_offset``, one slice read per segment and field, then ``np.stack``.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from benchmarks.data import RowData

__all__ = [
    "H5SegmentReader",
    "check_slices",
    "installed",
    "slice_buffer",
    "torchrl_data",
    "transition_buffer",
    "write_h5_segments",
]

H5_CHUNK_ROWS = 100
H5_CACHE_BYTES = 256 << 20


def torchrl_data() -> Any:
    """``torchrl.data`` (imported by name: TorchRL is optional and ships no type hints)."""
    return importlib.import_module("torchrl.data")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (peers are optional: the bench group)."""
    return importlib.util.find_spec(module) is not None


def _short(key: str) -> str:
    return key.split("/", 1)[1]


def _tensordict(data: RowData) -> Any:
    import torch
    from tensordict import TensorDict

    columns = {_short(key): torch.from_numpy(array) for key, array in data.rows.items()}
    columns["episode"] = torch.from_numpy(data.episode_ids())
    return TensorDict(columns, batch_size=[data.num_rows])


def slice_buffer(
    data: RowData, length: int, batch: int, *, scratch_dir: Path | None = None
) -> Callable[[], Any]:
    """A TorchRL ``ReplayBuffer`` + ``SliceSampler`` holding ``data``; returns its sampler.

    ``scratch_dir`` given: ``LazyMemmapStorage`` there (disk); else ``LazyTensorStorage``.
    Each call returns a TensorDict ``[batch, length + 1]``.
    """
    rl = torchrl_data()
    LazyMemmapStorage, LazyTensorStorage = rl.LazyMemmapStorage, rl.LazyTensorStorage
    ReplayBuffer = rl.ReplayBuffer
    SliceSampler = rl.SliceSampler

    size = data.num_rows
    storage = (
        LazyTensorStorage(size)
        if scratch_dir is None
        else LazyMemmapStorage(size, scratch_dir=str(scratch_dir))
    )
    sampler = SliceSampler(
        slice_len=length + 1, traj_key="episode", strict_length=True, cache_values=True
    )
    buffer = ReplayBuffer(storage=storage, sampler=sampler, batch_size=batch * (length + 1))
    buffer.extend(_tensordict(data))

    def sample() -> Any:
        return buffer.sample().reshape(batch, length + 1)

    return sample


def check_slices(sample: Any, data: RowData) -> None:
    """A TorchRL slice batch stays within one episode and holds that episode's rows."""
    episodes = sample["episode"].numpy()
    if not (episodes == episodes[:, :1]).all():
        raise AssertionError("TorchRL slice crosses an episode boundary")
    obs = sample["observation"].numpy()
    for b in range(min(len(obs), 8)):
        rows = data.episode_rows(int(episodes[b, 0]))["observation/observation"]
        hits = np.flatnonzero((rows == obs[b, 0]).reshape(len(rows), -1).all(axis=1))
        if not any(np.array_equal(rows[h : h + len(obs[b])], obs[b]) for h in hits):
            raise AssertionError("TorchRL slice does not match its episode's rows")


def transition_buffer(data: RowData, batch: int) -> Callable[[], Any]:
    """A plain TorchRL ``ReplayBuffer`` of transitions (obs, action, reward, next obs)."""
    import torch
    from tensordict import TensorDict

    rl = torchrl_data()
    LazyTensorStorage, ReplayBuffer = rl.LazyTensorStorage, rl.ReplayBuffer

    last = data.offsets + data.lengths  # the last row of an episode starts no transition
    keep = np.ones(data.num_rows, dtype=bool)
    keep[last] = False
    current = np.flatnonzero(keep)
    obs = data.rows["observation/observation"]
    columns: dict[Any, Any] = {
        "observation": torch.from_numpy(obs[current]),
        "action": torch.from_numpy(data.rows["action/action"][current + 1]),
        "reward": torch.from_numpy(data.rows["reward/reward"][current + 1]),
    }
    columns[("next", "observation")] = torch.from_numpy(obs[current + 1])
    transitions = TensorDict(columns, batch_size=[len(current)])
    buffer = ReplayBuffer(storage=LazyTensorStorage(len(current)), batch_size=batch)
    buffer.extend(transitions)
    return buffer.sample  # type: ignore[no-any-return]


def write_h5_segments(path: Path, data: RowData) -> None:
    """Write ``data`` as a world-model repository does: one file, ``ep_len``/``ep_offset``.

    Every column is chunked by 100 rows and compressed with Blosc LZ4 (byte shuffle).
    """
    import h5py
    import hdf5plugin

    blosc = hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)
    with h5py.File(path, "w") as handle:
        handle.create_dataset("ep_len", data=data.lengths + 1)
        handle.create_dataset("ep_offset", data=data.offsets)
        for key, array in data.rows.items():
            chunks = (min(H5_CHUNK_ROWS, len(array)), *array.shape[1:])
            handle.create_dataset(_short(key), data=array, chunks=chunks, **dict(blosc))


class H5SegmentReader:
    """Reads segments from :func:`write_h5_segments` files with h5py, one slice each.

    The file is opened with a 256 MiB chunk cache, as such loaders configure it.
    """

    def __init__(self, path: Path, keys: list[str], cache_bytes: int = H5_CACHE_BYTES) -> None:
        import h5py
        import hdf5plugin  # registers the Blosc filter

        del hdf5plugin
        self.file = h5py.File(path, "r", rdcc_nbytes=cache_bytes, rdcc_nslots=10007)
        self.ep_offset = self.file["ep_offset"][:]
        self.columns = {key: self.file[_short(key)] for key in keys}

    def read(
        self, episodes: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], length: int
    ) -> dict[str, npt.NDArray[Any]]:
        """``[B, length + 1, ...]`` rows of every field for windows ``(episode, start)``."""
        first = (self.ep_offset[episodes] + starts).tolist()
        return {
            key: np.stack([column[lo : lo + length + 1] for lo in first])
            for key, column in self.columns.items()
        }

    def close(self) -> None:
        """Close the file."""
        self.file.close()
