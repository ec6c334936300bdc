"""Timing, latency percentiles, RSS (children included) and bytes on disk.

Systems are measured in interleaved rounds (A, B, C, A, B, C, ...) and a system's rate is
the median over its rounds, so load from other processes on a shared machine hits every
system alike and the ratios stay meaningful.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "MB",
    "CallStats",
    "RSSMonitor",
    "disk_bytes",
    "interleave",
    "rss_bytes",
    "rss_split",
    "time_first",
]

MB = 1 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _proc_rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as handle:
        return int(handle.read().split()[1]) * _PAGE


def _proc_children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                found += [int(c) for c in handle.read().split()]
    return found


def rss_split() -> tuple[int, int]:
    """Current RSS in bytes of this process and of all its children (recursively).

    Uses psutil when installed, else ``/proc`` (Linux), else the peaks from getrusage.
    """
    # psutil is optional (the bench group); imported by name so type checkers need no stubs
    try:
        psutil: Any = importlib.import_module("psutil")
    except ImportError:
        psutil = None
    if psutil is not None:
        me = psutil.Process()
        kids = 0
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                kids += int(child.memory_info().rss)
        return int(me.memory_info().rss), kids
    if os.path.exists("/proc/self/statm"):
        kids = 0
        pending = _proc_children(os.getpid())
        while pending:
            pid = pending.pop()
            with contextlib.suppress(OSError):
                kids += _proc_rss(pid)
                pending += _proc_children(pid)
        return _proc_rss(os.getpid()), kids
    return peak_rusage_bytes(), 0


def rss_bytes(*, children: bool = True) -> int:
    """Current RSS of this process, plus its children unless ``children=False``."""
    own, kids = rss_split()
    return own + kids if children else own


def peak_rusage_bytes() -> int:
    """Peak RSS of this process plus the peak of its largest waited-for child."""
    scale = 1 if os.uname().sysname == "Darwin" else 1024  # ru_maxrss is KiB on Linux
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int((own + kids) * scale)


@dataclass
class Phase:
    """RSS while a phase ran: at its start, at its end, and the peak sampled in between.

    ``peak`` counts this process and its children; ``children_peak`` only the children.
    """

    start: int
    peak: int
    end: int = 0
    children_peak: int = 0

    @property
    def children_peak_mb(self) -> float:
        """Peak RSS of the children alone (workers, helper processes), in MiB."""
        return self.children_peak / MB

    @property
    def held_mb(self) -> float:
        """RSS the phase added and kept, in MiB."""
        return (self.end - self.start) / MB

    @property
    def peak_mb(self) -> float:
        """Peak RSS of the whole process (children included) during the phase, in MiB."""
        return self.peak / MB

    @property
    def peak_delta_mb(self) -> float:
        """Peak RSS above the phase's start, in MiB."""
        return (self.peak - self.start) / MB


class RSSMonitor:
    """Samples RSS (children included) in a thread; :meth:`phase` records one phase's peak."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self._interval = interval_s
        self._phases: list[Phase] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-monitor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def _sample(self) -> int:
        own, kids = rss_split()
        with self._lock:
            for phase in self._phases:
                phase.peak = max(phase.peak, own + kids)
                phase.children_peak = max(phase.children_peak, kids)
        return own + kids

    @contextlib.contextmanager
    def phase(self) -> Iterator[Phase]:
        """Track the peak RSS while the block runs."""
        start = rss_bytes()
        phase = Phase(start=start, peak=start)
        with self._lock:
            self._phases.append(phase)
        try:
            yield phase
        finally:
            phase.end = self._sample()
            with self._lock:
                self._phases.remove(phase)

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


@dataclass
class CallStats:
    """Per-call latencies (seconds) and per-round rates of one system."""

    latencies: list[float] = field(default_factory=list)
    round_rates: list[float] = field(default_factory=list)
    units_per_call: float = 1.0

    @property
    def rate(self) -> float | None:
        """Median over rounds of units per second."""
        return float(np.median(self.round_rates)) if self.round_rates else None

    def percentile_ms(self, q: float) -> float | None:
        """The ``q``-th percentile of call latency in ms."""
        if not self.latencies:
            return None
        return float(np.percentile(np.asarray(self.latencies), q) * 1e3)

    def figures(self) -> dict[str, Any]:
        """``rate``, ``p50_ms`` and ``p99_ms`` for a :class:`~benchmarks.results.Figure`."""
        return {
            "rate": self.rate,
            "p50_ms": self.percentile_ms(50),
            "p99_ms": self.percentile_ms(99),
        }


def _one_round(call: Callable[[], Any], seconds: float, min_calls: int, stats: CallStats) -> None:
    count = 0
    began = time.perf_counter()
    now = began
    while count < min_calls or now - began < seconds:
        t0 = time.perf_counter()
        call()
        now = time.perf_counter()
        stats.latencies.append(now - t0)
        count += 1
    stats.round_rates.append(count * stats.units_per_call / (now - began))


def interleave(
    calls: dict[str, Callable[[], Any]],
    *,
    rounds: int,
    seconds: float,
    min_calls: int,
    units_per_call: dict[str, float] | None = None,
    pause: dict[str, Callable[[], Any]] | None = None,
) -> dict[str, CallStats]:
    """Time every callable in ``rounds`` interleaved rounds of about ``seconds`` each.

    ``pause[name]`` runs after each of that system's rounds (e.g. stopping a read-ahead
    thread so it prepares nothing while the others are measured).
    """
    units = units_per_call or {}
    stats = {name: CallStats(units_per_call=units.get(name, 1.0)) for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            _one_round(call, seconds, min_calls, stats[name])
            if pause and name in pause:
                pause[name]()
    return stats


def time_first(open_: Callable[[], Callable[[], Any]]) -> tuple[Callable[[], Any], float]:
    """Open a system and fetch its first result; returns the call and the latency in ms."""
    began = time.perf_counter()
    call = open_()
    call()
    return call, (time.perf_counter() - began) * 1e3


def disk_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of a file or of every file under a folder (apparent size)."""
    root = Path(path)
    if root.is_file():
        return root.stat().st_size
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
