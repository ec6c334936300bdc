"""The rows every W9 import measures: the source read alone, then the timed import.

Each importer's rows (HDF5, LeRobot, Lance) read their source with the plain library
first (the ceiling), then import it into Zarr and report MB/s of the same raw bytes, the
peak RSS above the start of the import, and the disk the dataset takes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from benchmarks.measure import MB, disk_bytes
from benchmarks.results import Figure, Target

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from benchmarks.harness import Context

READ_BUDGET_MB = 256  # the importers' default read budget
RSS_FLOOR_MB = 64  # below this, interpreter and library noise dominate

__all__ = ["READ_BUDGET_MB", "RSS_FLOOR_MB", "ceiling", "rss_target", "timed_import"]


def ceiling(system: str, source: Path, raw: int, seconds: float) -> Figure:
    """The figure of reading ``raw`` bytes of ``source`` alone in ``seconds``."""
    read = Figure(system, "ceiling", "MB/s", rate=raw / MB / seconds)
    read.disk_mb = disk_bytes(source) / MB
    read.extra = {"raw_mb": raw / MB, "seconds": seconds}
    return read


def timed_import(
    context: Context,
    system: str,
    read: Figure,
    target: Path,
    run: Callable[[], Any],
    check: Callable[[Any], None],
) -> Figure:
    """Time ``run()`` (an import into ``target`` returning its dataset), then ``check`` it.

    The rate counts the ceiling's raw bytes; an error becomes the figure's status, so one
    failing importer does not stop the table.
    """
    mine = Figure(system, "episodata", "MB/s")
    mine.extra["ceiling"] = read.system
    context.log(f"  W9: importing into {target.name}")
    try:
        with context.monitor.phase() as phase:
            began = time.perf_counter()
            dataset = run()
            seconds = time.perf_counter() - began
        check(dataset)
        mine.rate = read.extra["raw_mb"] / seconds
        mine.first_ms = seconds * 1e3
        mine.rss_peak_mb = phase.peak_mb
        mine.rss_held_mb = phase.peak_delta_mb
        mine.disk_mb = disk_bytes(target) / MB
        mine.extra.update(seconds=seconds, rss_peak_delta_mb=phase.peak_delta_mb)
        mine.note = "rss_held = peak RSS above the start of the import"
        dataset.close()
    except Exception as err:  # noqa: BLE001 (reported in the table)
        mine.status = f"error: {type(err).__name__}: {err}"
    return mine


def rss_target(name: str, mine: Figure | None, read: Figure | None, note: str = "") -> Target:
    """Peak RSS of an import against what it must hold: the source, or its read budget."""
    bound = None
    if mine is not None and mine.ok and read is not None:
        budget = max(min(read.extra["raw_mb"], READ_BUDGET_MB), RSS_FLOOR_MB)
        bound = mine.extra["rss_peak_delta_mb"] / budget
    return Target(
        f"{name} import peak RSS / max({RSS_FLOOR_MB}, min(source, {READ_BUDGET_MB})) MiB",
        1.5,
        bound,
        comparison="<=",
        note=note,
    )
