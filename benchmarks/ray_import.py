"""W9-style import of many D4RL-shaped files: the local executor against Ray, in one run.

``uv run python -m benchmarks.ray_import [--files 16] [--rows 50000] [--cpus 2]`` writes
``--files`` D4RL-shaped files (W9's generator), imports them to Zarr with one pipeline
run per executor, checks that both datasets hold the same episodes, and prints a table:
wall time of each run, Ray's start-up apart (``ray.init`` of a local cluster), the time
Ray's tasks spent importing, the coordinator's commit and its share of the Ray run, the
speedup over local and the speedup per added CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.workloads.imports import write_d4rl


def _pipeline(files: list[Path], store: Path, executor: str) -> Any:
    from episodata_core.pipeline import Pipeline, load_config

    paths = ", ".join(f'"{f}"' for f in files)
    text = (
        f'[source]\nimporter = "d4rl"\npath = [{paths}]\n'
        f'[store]\npath = "{store}"\n[executor]\nname = "{executor}"\n'
    )
    return Pipeline(load_config(text))


def _same(a: Any, b: Any) -> bool:
    ta, tb = a.backend.episode_table(), b.backend.episode_table()
    if not (np.array_equal(ta.length, tb.length) and np.array_equal(ta.terminated, tb.terminated)):
        return False
    keys = a.schema.qualified_keys
    for index in range(0, len(ta), max(1, len(ta) // 50)):  # a spread of episodes
        stop = int(ta.length[index]) + 1
        x, y = a.backend.read_rows(index, 0, stop, keys), b.backend.read_rows(index, 0, stop, keys)
        # NaN is a value here (D4RL infos mark unknown rows with it): equal when both are
        if any(not np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f") for k in keys):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print its table (and JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--rows", type=int, default=50_000, help="rows per file")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # workers share this tree
    with tempfile.TemporaryDirectory(prefix="ray-import-") as tmp:
        folder = Path(tmp)
        files = [folder / f"d4rl-{n:02d}.hdf5" for n in range(args.files)]
        for number, path in enumerate(files):
            write_d4rl(path, args.rows, seed=number)
        source_mb = sum(p.stat().st_size for p in files) / 1e6

        started = time.perf_counter()
        local = _pipeline(files, folder / "local", "local").run(progress=False)
        local_s = time.perf_counter() - started

        import ray

        for attempt in range(3):
            # a loaded machine can miss Ray's fixed 30 s start-up deadline: try again
            started = time.perf_counter()
            try:
                ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
                break
            except Exception:
                ray.shutdown()
                if attempt == 2:
                    raise
        startup_s = time.perf_counter() - started
        started = time.perf_counter()
        result = _pipeline(files, folder / "ray", "ray").run(progress=False)
        ray_s = time.perf_counter() - started
        ran = result.dataset.manifest.metadata["pipeline"]["executor"]
        same = _same(result.dataset, local.dataset)
        local.dataset.close()
        result.dataset.close()
        ray.shutdown()
    commit_s = ran["seconds"]["commit"]
    speedup = local_s / ray_s
    figures = {
        "files": args.files,
        "rows_per_file": args.rows,
        "source_mb": round(source_mb, 1),
        "cpus": ran["cluster"]["cpus"],
        "local_s": round(local_s, 2),
        "ray_startup_s": round(startup_s, 2),
        "ray_run_s": round(ray_s, 2),
        "ray_task_s_total": ran["seconds"]["tasks"],
        "ray_commit_s": commit_s,
        "coordinator_share": round(commit_s / ray_s, 3),
        "speedup": round(speedup, 3),
        "speedup_per_added_cpu": round((speedup - 1) / max(1, ran["cluster"]["cpus"] - 1), 3),
        "same_episodes": same,
    }
    rows = [
        ("source", f"{args.files} files x {args.rows} rows, {source_mb:.1f} MB"),
        ("local executor", f"{local_s:.2f} s ({source_mb / local_s:.1f} MB/s)"),
        ("Ray start-up (ray.init)", f"{startup_s:.2f} s"),
        ("ray executor, Ray running", f"{ray_s:.2f} s ({source_mb / ray_s:.1f} MB/s)"),
        ("  of which coordinator commit", f"{commit_s:.2f} s ({commit_s / ray_s:.0%})"),
        ("  task time, summed over tasks", f"{ran['seconds']['tasks']:.2f} s"),
        ("speedup (local / ray run)", f"{speedup:.2f}x on {figures['cpus']} CPUs"),
        ("speedup per added CPU", f"{figures['speedup_per_added_cpu']:+.2f}"),
        ("ray incl. start-up vs local", f"{(startup_s + ray_s) / local_s:.2f}x the time"),
        ("same episodes", str(same)),
    ]
    width = max(len(r[0]) for r in rows)
    print("\n".join(f"| {name:<{width}} | {value} |" for name, value in rows))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
