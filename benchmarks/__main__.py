"""``python -m benchmarks``: run W1-W9 and print one table of figures, ratios and targets.

Examples
--------
``uv run --group bench python -m benchmarks``                 default sizes (performance.md)
``uv run --group bench python -m benchmarks --quick``         scaled down, a few minutes
``uv run --group bench python -m benchmarks --only W1,W3 --json out.json``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.config import sizes_for

__all__ = ["main"]

ALL = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0] if __doc__ else None
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="scaled-down sizes (< 3 minutes)")
    size.add_argument("--tiny", action="store_true", help="minimal sizes, for the smoke test")
    parser.add_argument("--only", default=",".join(ALL), help="workloads, e.g. W1,W3")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--workdir", type=Path, help="keep data and datasets in this folder")
    parser.add_argument("--no-peers", action="store_true", help="skip TorchRL and h5py")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run every workload in this process (default with --tiny)",
    )
    parser.add_argument("--isolate", action="store_true", help="one process per workload")
    parser.add_argument("--seed", type=int, default=0, help="seed of all generated data")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (OMP_NUM_THREADS); 1 keeps TorchRL fast on busy machines",
    )
    return parser


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def main(argv: list[str] | None = None) -> int:
    """Run the selected workloads, print the table, optionally write JSON."""
    args = _parser().parse_args(argv)
    # before anything imports torch (here or in a workload process, which inherits it)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.torch_threads))
    from benchmarks.runner import environment, run_all
    from benchmarks.table import render, summary

    preset = "tiny" if args.tiny else "quick" if args.quick else "default"
    sizes = sizes_for(preset, seed=args.seed)
    chosen = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(ALL))
    if unknown:
        print(f"unknown workloads {unknown}; choose from {', '.join(ALL)}", file=sys.stderr)
        return 2
    isolate = args.isolate or not (args.in_process or args.tiny)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))
    else:
        run_dir = Path(tempfile.mkdtemp(prefix="episodata-bench-"))

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    began = time.perf_counter()
    before = environment()
    try:
        results = run_all(chosen, sizes, run_dir, isolate=isolate, peers=not args.no_peers, log=log)
    finally:
        if args.workdir is None:
            shutil.rmtree(run_dir, ignore_errors=True)
    table = render(results)
    print(table)
    print()
    print(summary(results))
    if args.json is not None:
        document = {
            "preset": preset,
            "sizes": sizes.to_json(),
            "command": [
                "python",
                "-m",
                "benchmarks",
                *(argv if argv is not None else sys.argv[1:]),
            ],
            "isolated": isolate,
            "environment": before,
            "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "wall_s": time.perf_counter() - began,
            "summary": summary(results),
            "table": table,
            "workloads": [r.to_json() for r in results],
        }
        args.json.write_text(json.dumps(document, indent=1, default=_plain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
