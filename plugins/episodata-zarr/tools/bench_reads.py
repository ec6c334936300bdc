"""W3-like check: random image segments through ``gather_rows`` vs a naive TensorStore reader.

Run with ``uv run python plugins/episodata-zarr/tools/bench_reads.py``. Both read the
same ``data/observation/camera`` array of one dataset, freshly opened, with the same
cache pool: the naive reader issues one read per segment and waits on all of them, as
performance.md's ceiling describes; ``gather_rows`` coalesces reads per chunk.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from choose_codec import image_frames

from episodata_core.protocols import GatherRequest
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_zarr import ZarrBackend, ZarrOptions


def build(folder: Path, episodes: int, steps: int, options: dict[str, Any]) -> None:
    """W2/W3 data: ``episodes`` episodes of ``steps`` steps of uint8 [3, 64, 64] frames."""
    schema = DatasetSchema([FieldSpec("camera", shape=(3, 64, 64), dtype="uint8", layout="CHW")])
    backend = ZarrBackend.create(schema, str(folder), ZarrOptions(**options))
    frames = image_frames(steps + 1, noise=1.0)
    for e in range(episodes):
        backend.add_episode(
            {"observation/camera": np.roll(frames, e, axis=0)}, terminated=False, truncated=True
        )
    backend.close()


def main() -> None:
    """Print batches per second of both readers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--chunk-bytes", type=int, default=256 << 10)
    parser.add_argument("--cache-bytes", type=int, default=256 << 20)
    args = parser.parse_args()
    import tensorstore as ts

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "w3"
        build(folder, args.episodes, args.steps, {"chunk_bytes": args.chunk_bytes})
        rows = args.steps + 1
        rng = np.random.default_rng(0)

        def batch() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
            episodes = rng.integers(0, args.episodes, size=args.batch)
            starts = rng.integers(0, rows - args.length - 1 + 1, size=args.batch)
            return episodes.astype(np.int64), starts.astype(np.int64)

        context = ts.Context({"cache_pool": {"total_bytes_limit": args.cache_bytes}})
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{folder}/data/observation/camera/"},
        }
        naive = ts.open(spec, context=context).result()

        def naive_read() -> None:
            episodes, starts = batch()
            begin = episodes * rows + starts
            futures = [naive[int(b) : int(b) + args.length + 1].read() for b in begin]
            np.stack([f.result() for f in futures])

        backend = ZarrBackend.open(str(folder), ZarrOptions(cache_pool_bytes=args.cache_bytes))
        counts = np.full(args.batch, args.length + 1, dtype=np.int64)

        def gather() -> None:
            episodes, starts = batch()
            request = GatherRequest(
                episodes,
                starts,
                counts,
                np.zeros_like(counts),
                args.length + 1,
                ("observation/camera",),
            )
            backend.gather_rows(request)

        for name, read in (("naive TensorStore", naive_read), ("gather_rows", gather)) * 2:
            read()
            start, done = time.perf_counter(), 0
            while time.perf_counter() - start < args.seconds:
                read()
                done += 1
            print(f"{name:<18} {done / (time.perf_counter() - start):8.1f} batches/s")
        backend.close()


if __name__ == "__main__":
    main()
