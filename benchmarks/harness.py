"""Shared machinery of the workloads: set up systems, check them, time them side by side.

A workload registers each system with a ``build`` function that sets it up (timed for
RSS) and returns an :class:`Opened`: how to open it for reading, how to check one of its
results against the ceiling, and what it holds on disk. :meth:`Systems.run` builds every
system, checks it, measures its first batch, then times them all in interleaved rounds.
"""

from __future__ import annotations

import importlib
import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.measure import MB, CallStats, RSSMonitor, disk_bytes, interleave, time_first
from benchmarks.peers import installed
from benchmarks.results import Figure, Role, WorkloadResult

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from benchmarks.config import Sizes

__all__ = ["Context", "Opened", "Systems", "assert_rows_equal"]


@dataclass
class Context:
    """What every workload gets: sizes, a scratch folder, the RSS monitor, options."""

    sizes: Sizes
    run_dir: Path
    monitor: RSSMonitor
    peers: bool = True
    log: Callable[[str], None] = print


@dataclass
class Opened:
    """A system after setup.

    ``open()`` returns the callable that produces one result (a batch, a call); the time
    from ``open()`` to its first result is the first-batch latency. ``check(call)`` runs
    once before timing and raises when a result differs from the ceiling's.
    ``finish()`` runs once after every round (e.g. a dataset's ``close()``, where a
    backend folds what it deferred); its time is spread over the units the rounds
    produced and counted in the rate (``extra["finish_ms"]``, and the rate without it
    in ``extra["rate_before_finish"]``).
    """

    open: Callable[[], Callable[[], Any]]
    check: Callable[[Callable[[], Any]], None] | None = None
    pause: Callable[[], Any] | None = None
    finish: Callable[[], Any] | None = None
    disk: Path | None = None
    units_per_call: float = 1.0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Entry:
    name: str
    role: Role
    build: Callable[[], Opened]
    requires: str | None
    unit: str | None = None


def assert_rows_equal(what: str, got: Mapping[str, Any], want: Mapping[str, Any]) -> None:
    """Raise unless every field of ``got`` equals ``want`` exactly (shapes included)."""
    for key, expected in want.items():
        actual = np.asarray(got[key])
        if actual.shape != expected.shape or not np.array_equal(actual, expected):
            raise AssertionError(
                f"{what}: field {key!r} differs from the NumPy gather "
                f"(shape {actual.shape} vs {expected.shape})"
            )


class Systems:
    """The systems of one workload, measured together."""

    def __init__(
        self,
        context: Context,
        result: WorkloadResult,
        unit: str,
        *,
        preload: tuple[str, ...] = (),
    ) -> None:
        self._preload = preload
        self._context = context
        self._result = result
        self._unit = unit
        self._entries: list[_Entry] = []

    def add(
        self,
        name: str,
        role: Role,
        build: Callable[[], Opened],
        *,
        requires: str | None = None,
        unit: str | None = None,
    ) -> None:
        """Register a system; ``requires`` names a module that must be installed.

        ``unit`` overrides the workload's unit for this system (e.g. a floor measured
        per call among systems measured per step).
        """
        self._entries.append(_Entry(name, role, build, requires, unit))

    def run(self) -> None:
        """Build, check and time every system; append a figure per system to the result."""
        sizes = self._context.sizes
        # import heavy peers first, so no system's RSS counts another library's import
        wanted = {e.requires for e in self._entries if e.requires} | set(self._preload)
        for module in sorted(m for m in wanted if m and installed(m)):
            importlib.import_module(module)
        # TorchRL logs every storage it initializes to stdout, between the table's lines
        logging.getLogger("torchrl").setLevel(logging.WARNING)
        calls: dict[str, Callable[[], Any]] = {}
        opened: dict[str, Opened] = {}
        figures: dict[str, Figure] = {}
        for entry in self._entries:
            figure = Figure(entry.name, entry.role, entry.unit or self._unit)
            figures[entry.name] = figure
            self._result.figures.append(figure)
            if entry.requires is not None and not installed(entry.requires):
                figure.status = "not installed"
                figure.note = f"{entry.requires} is in the bench dependency group"
                continue
            if entry.role == "peer" and not self._context.peers:
                figure.status = "skipped: --no-peers"
                continue
            self._context.log(f"  {self._result.id} {entry.name}: setting up")
            try:
                with self._context.monitor.phase() as phase:
                    began = time.perf_counter()
                    system = entry.build()
                    figure.extra["setup_s"] = round(time.perf_counter() - began, 3)
                    call, figure.first_ms = time_first(system.open)
                    if system.check is not None:
                        system.check(call)
                        figure.extra["checked"] = True
            except Exception as err:  # noqa: BLE001 (a failing system is reported, not fatal)
                figure.status = f"error: {type(err).__name__}: {err}"
                figure.extra["traceback"] = traceback.format_exc(limit=6)
                continue
            figure.rss_peak_mb = phase.peak_mb
            figure.rss_held_mb = phase.held_mb
            figure.note = system.note
            figure.extra.update(system.extra)
            if system.disk is not None:
                figure.disk_mb = disk_bytes(system.disk) / MB
            calls[entry.name] = call
            opened[entry.name] = system
        if not calls:
            return
        self._context.log(f"  {self._result.id}: timing {', '.join(calls)}")
        stats = interleave(
            calls,
            rounds=sizes.rounds,
            seconds=sizes.round_seconds,
            min_calls=sizes.min_calls,
            units_per_call={n: s.units_per_call for n, s in opened.items()},
            pause={n: s.pause for n, s in opened.items() if s.pause is not None},
        )
        for name, stat in stats.items():
            figure = figures[name]
            for key, value in stat.figures().items():
                setattr(figure, key, value)
            figure.extra["calls"] = len(stat.latencies)
        for system in opened.values():
            if system.pause is not None:
                system.pause()
        for name, system in opened.items():
            if system.finish is not None:
                _finish(figures[name], system.finish, stats[name])


def _finish(figure: Figure, finish: Callable[[], Any], stat: CallStats) -> None:
    """Run ``finish`` once and spread its time over every unit the rounds produced."""
    began = time.perf_counter()
    try:
        finish()
    except Exception as err:  # noqa: BLE001 (a failing system is reported, not fatal)
        figure.status = f"error: {type(err).__name__} in finish: {err}"
        figure.extra["traceback"] = traceback.format_exc(limit=6)
        return
    seconds = time.perf_counter() - began
    figure.extra["finish_ms"] = seconds * 1e3
    units = len(stat.latencies) * stat.units_per_call
    if figure.rate and units:
        figure.extra["rate_before_finish"] = figure.rate
        figure.rate = 1.0 / (1.0 / figure.rate + seconds / units)
