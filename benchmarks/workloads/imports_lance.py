"""W9's Lance row: a stable-worldmodel-shaped Lance dataset, imported with the ``lewm`` importer.

The dataset is written block by block like ``World.collect(format="lance")`` writes one:
``episode_idx``/``step_idx`` int32, every number a ``fixed_size_list<float32>``, the
pixels one JPEG per row (Pillow, quality 95), the same drawings as the HDF5 file. The
ceiling reads every column of the table once with pylance (``to_batches``) and discards
it; the JPEGs stay encoded there, so the import's decoding is part of what the ratio
measures. Rates are megabytes of the Arrow table (JPEGs at their encoded size) per second.
"""

from __future__ import annotations

import io
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["check_lance", "decode_lance", "read_lance", "write_lewm_lance"]

_BLOCK = 5_000


def _jpeg(frame: Any) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def write_lewm_lance(path: Path, rows: int, seed: int, side: int = 64) -> None:
    """An swm-shaped Lance dataset: JPEG pixels, action, state, reward, flags."""
    import lance
    import pyarrow as pa

    rng = np.random.default_rng([seed, 11])
    lengths: list[int] = []
    while sum(lengths) < rows:
        lengths.append(int(rng.integers(100, 201)))
    lengths[-1] -= sum(lengths) - rows
    episode = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    step = (np.arange(rows) - np.repeat(starts, lengths)).astype(np.int32)
    last = step == np.repeat(np.asarray(lengths) - 1, lengths)

    def floats(values: Any) -> Any:
        values = np.asarray(values, dtype=np.float32).reshape(len(values), -1)
        return pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), values.shape[1])

    def batches() -> Iterator[Any]:
        for lo in range(0, rows, _BLOCK):
            hi = min(lo + _BLOCK, rows)
            n = hi - lo
            frames = rng.integers(0, 8, size=(n, side, side, 3), dtype=np.uint8) + np.uint8(120)
            frames[:, side // 4 : side // 2, side // 4 : side // 2] = 250
            action = rng.standard_normal((n, 2), dtype=np.float32)
            action[last[lo:hi]] = np.nan  # action-out: none is taken at the last row
            reward = rng.standard_normal(n, dtype=np.float32)
            reward[step[lo:hi] == 0] = np.nan  # nothing was earned arriving at the reset
            yield pa.record_batch(
                {
                    "episode_idx": pa.array(episode[lo:hi]),
                    "step_idx": pa.array(step[lo:hi]),
                    "pixels": pa.array([_jpeg(f) for f in frames], pa.binary()),
                    "state": floats(rng.standard_normal((n, 4), dtype=np.float32)),
                    "reward": floats(reward),
                    "terminated": floats(last[lo:hi] & (rng.random(n) < 0.5)),
                    "truncated": floats(np.zeros(n)),
                    "action": floats(action),
                }
            )

    first = next(batches())
    schema = first.schema
    reader = pa.RecordBatchReader.from_batches(schema, batches())
    lance.write_dataset(reader, str(path), schema=schema)


def read_lance(path: Path) -> tuple[int, float]:
    """Read every column of the table once with pylance; ``(Arrow bytes, seconds)``."""
    import lance

    began = time.perf_counter()
    total = 0
    for batch in lance.dataset(str(path)).to_batches(batch_size=_BLOCK):
        total += batch.nbytes
    return total, time.perf_counter() - began


def decode_lance(path: Path) -> tuple[int, float]:
    """Read the table and decode every JPEG with Pillow; ``(Arrow bytes, seconds)``."""
    import lance
    from PIL import Image

    began = time.perf_counter()
    total = 0
    for batch in lance.dataset(str(path)).to_batches(batch_size=_BLOCK):
        total += batch.nbytes
        for blob in batch.column("pixels").to_pylist():
            np.asarray(Image.open(io.BytesIO(blob)))
    return total, time.perf_counter() - began


def check_lance(dataset: Any, source: Path, *, decoded: bool) -> None:
    """Episode 0 of the import holds the source's first rows (pixels decoded by Pillow)."""
    import lance
    from PIL import Image

    table = lance.dataset(str(source)).to_table(columns=["episode_idx", "pixels"], limit=400)
    rows = int((table.column("episode_idx").to_numpy() == 0).sum())
    blobs = table.column("pixels").to_pylist()[:rows]
    got = np.asarray(dataset.episode(0).read().all_obs.pixels)
    if decoded:
        want = np.stack([np.asarray(Image.open(io.BytesIO(b))) for b in blobs])
        same = np.array_equal(got, want)
    else:
        same = [bytes(b) for b in got] == blobs
    if not same:
        raise AssertionError("lewm-lance: episode 0 does not hold the source's rows")
