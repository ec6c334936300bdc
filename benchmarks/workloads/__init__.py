"""The workloads of performance.md, by id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.workloads.disk import run_w3
from benchmarks.workloads.imports import run_w9
from benchmarks.workloads.loader import run_w8
from benchmarks.workloads.memory import run_w1, run_w2, run_w4
from benchmarks.workloads.scaling import run_w6, run_w7
from benchmarks.workloads.writes import run_w5

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks.harness import Context
    from benchmarks.results import WorkloadResult

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, Callable[[Context], WorkloadResult]] = {
    "W1": run_w1,
    "W2": run_w2,
    "W3": run_w3,
    "W4": run_w4,
    "W5": run_w5,
    "W6": run_w6,
    "W7": run_w7,
    "W8": run_w8,
    "W9": run_w9,
}
