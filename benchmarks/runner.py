"""Run workloads, each in a fresh process by default, and collect their results.

A fresh process per workload keeps peak RSS meaningful (one workload's buffers never
count against the next) and bounds each workload's time with a timeout. The data of a
run is generated once, into the run folder, and every process loads the same bytes.
``isolate=False`` runs everything in this process (the smoke test does).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.config import Sizes
from benchmarks.harness import Context
from benchmarks.measure import MB, RSSMonitor, peak_rusage_bytes
from benchmarks.results import WorkloadResult

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["environment", "run_all", "run_in_process", "worker_main"]

_DISTRIBUTIONS = ("numpy", "torch", "torchrl", "tensordict", "tensorstore", "h5py", "zarr")


def _plain(value: Any) -> Any:
    """JSON for NumPy scalars (and anything else, as text)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def environment() -> dict[str, Any]:
    """Machine and package versions, recorded with the results."""
    versions: dict[str, str | None] = {}
    for name in ("episodata-core", *_DISTRIBUTIONS):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "versions": versions,
    }


def run_in_process(workload: str, context: Context) -> WorkloadResult:
    """Run one workload here; failures become a result with an error status."""
    from benchmarks.workloads import WORKLOADS

    began = time.perf_counter()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    try:
        result = WORKLOADS[workload](context)
    except Exception as err:  # noqa: BLE001 (one broken workload must not stop the run)
        result = WorkloadResult(workload, workload, status=f"error: {type(err).__name__}: {err}")
        result.extra["traceback"] = traceback.format_exc(limit=8)
    result.wall_s = time.perf_counter() - began
    result.extra["load_average_start"] = load
    return result


def _isolated(
    group: list[str], sizes: Sizes, run_dir: Path, peers: bool, log: Callable[[str], None]
) -> list[WorkloadResult]:
    """Run ``group`` in one fresh process; one result per workload, failures included."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.runner",
        ",".join(group),
        str(run_dir),
        json.dumps(sizes.to_json()),
        "1" if peers else "0",
    ]
    began = time.perf_counter()
    timeout = sizes.workload_timeout_s * len(group)
    failure = None
    try:
        completed = subprocess.run(command, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        failure = f"timeout after {timeout:.0f} s"
    else:
        failure = f"error: worker exited with {completed.returncode} and no result"
    results = []
    for workload in group:
        out = run_dir / f"result-{workload}.json"
        if not out.exists():
            results.append(WorkloadResult(workload, workload, status=failure))
            continue
        result = WorkloadResult.from_json(json.loads(out.read_text()))
        result.extra["process_s"] = time.perf_counter() - began
        result.extra["process"] = ",".join(group)
        results.append(result)
        log(f"{workload}: {result.status} in {result.wall_s or 0:.1f} s")
    return results


def process_groups(workloads: list[str], sizes: Sizes) -> list[list[str]]:
    """Workloads that share a process: each alone, or (``share_process``) all but W8, W9.

    W8 forks workers, whose RSS would count the parent's memory, and W9 measures an
    import's RSS: both always get a fresh process.
    """
    alone = {"W8", "W9"}
    if not sizes.share_process:
        return [[w] for w in workloads]
    shared = [w for w in workloads if w not in alone]
    return ([shared] if shared else []) + [[w] for w in workloads if w in alone]


def run_all(
    workloads: list[str],
    sizes: Sizes,
    run_dir: Path,
    *,
    isolate: bool = True,
    peers: bool = True,
    log: Callable[[str], None] = print,
) -> list[WorkloadResult]:
    """Run ``workloads``; every one yields a result, even when it fails."""
    results: list[WorkloadResult] = []
    if isolate:
        for group in process_groups(workloads, sizes):
            log(f"{', '.join(group)}: running ({sizes.name} sizes, one process)")
            results += _isolated(group, sizes, run_dir, peers, log)
        order = {w: i for i, w in enumerate(workloads)}
        return sorted(results, key=lambda r: order.get(r.id, len(order)))
    monitor = RSSMonitor()
    try:
        for workload in workloads:
            log(f"{workload}: running ({sizes.name} sizes)")
            context = Context(sizes, run_dir, monitor, peers=peers, log=log)
            result = run_in_process(workload, context)
            log(f"{workload}: {result.status} in {result.wall_s or 0:.1f} s")
            results.append(result)
    finally:
        monitor.close()
    return results


def worker_main(argv: list[str]) -> int:
    """Entry point of a workload process: ``WORKLOADS RUN_DIR SIZES_JSON PEERS``.

    ``WORKLOADS`` is comma-separated; each result goes to ``RUN_DIR/result-<id>.json``.
    """
    workloads, run_dir, sizes_json, peers = argv
    raw = json.loads(sizes_json)
    for key in ("index_sizes", "online_prefill"):
        raw[key] = tuple(raw[key])
    sizes = replace(Sizes(name=raw["name"]), **raw)
    monitor = RSSMonitor()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    context = Context(sizes, Path(run_dir), monitor, peers=peers == "1", log=log)
    for workload in workloads.split(","):
        log(f"{workload}: running")
        result = run_in_process(workload, context)
        # the process's peak so far (RUSAGE, children included): per process, not workload
        result.peak_rss_mb = peak_rusage_bytes() / MB
        out = Path(run_dir) / f"result-{workload}.json"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result.to_json(), default=_plain))
        tmp.replace(out)
    monitor.close()
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
