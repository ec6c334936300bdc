"""What a run produces: one :class:`Figure` per system, targets, and workload results."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Figure", "Role", "Target", "WorkloadResult", "load_json", "ratio_target"]

Role = Literal["episodata", "ceiling", "peer"]


@dataclass
class Figure:
    """One system's figures in one workload.

    ``rate`` is in ``unit`` (batches/s, calls/s, steps/s, MB/s). Latencies are per call
    in milliseconds; ``first_ms`` runs from opening (a stream, a file, a loader) to the
    first result. ``rss_peak_mb`` is the process's peak RSS (children included) while
    this system was set up and measured; ``rss_held_mb`` is what its setup added and
    kept. ``status`` is ``"ok"``, ``"not installed"``, ``"skipped: ..."`` or
    ``"error: ..."``.
    """

    system: str
    role: Role
    unit: str
    rate: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    first_ms: float | None = None
    rss_peak_mb: float | None = None
    rss_held_mb: float | None = None
    disk_mb: float | None = None
    status: str = "ok"
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the figure was measured."""
        return self.status == "ok" and self.rate is not None


@dataclass
class Target:
    """A target of performance.md and the ratio this run measured for it."""

    name: str
    goal: float
    value: float | None
    comparison: Literal[">=", "<="] = ">="
    note: str = ""

    @property
    def met(self) -> bool | None:
        """Whether the measured value reaches the goal; ``None`` when not measured."""
        if self.value is None:
            return None
        return self.value >= self.goal if self.comparison == ">=" else self.value <= self.goal

    def describe(self) -> str:
        """E.g. ``0.82x numpy (>= 0.7: met)``."""
        mark = {True: "met", False: "MISSED", None: "n/a"}[self.met]
        shown = "-" if self.value is None else f"{self.value:.2f}"
        return f"{self.name} = {shown} ({self.comparison} {self.goal:g}: {mark})"


@dataclass
class WorkloadResult:
    """Everything one workload measured."""

    id: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    wall_s: float | None = None
    peak_rss_mb: float | None = None

    def figure(self, system: str) -> Figure | None:
        """The figure of ``system``, if any."""
        return next((f for f in self.figures if f.system == system), None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (targets carry their ``met`` verdict)."""
        document = asdict(self)
        for target, raw in zip(self.targets, document["targets"], strict=True):
            raw["met"] = target.met
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> WorkloadResult:
        """Rebuild a result written by :meth:`to_json`."""
        data = dict(document)
        data["figures"] = [Figure(**f) for f in data.get("figures", [])]
        data["targets"] = [
            Target(**{k: v for k, v in t.items() if k != "met"}) for t in data.get("targets", [])
        ]
        return cls(**data)


def ratio_target(
    result: WorkloadResult,
    numerator: str,
    denominator: str | list[str],
    goal: float,
    *,
    label: str | None = None,
) -> Target:
    """``numerator``'s rate over ``denominator``'s (the best of several) as a target."""
    top = result.figure(numerator)
    names = [denominator] if isinstance(denominator, str) else denominator
    bottoms = [f for f in (result.figure(n) for n in names) if f is not None and f.ok]
    shown = label or f"{numerator} / {'best of ' if len(names) > 1 else ''}{' | '.join(names)}"
    if top is None or not top.ok or not bottoms:
        return Target(shown, goal, None, note="not measured")
    best = max(bottoms, key=lambda f: f.rate or 0.0)
    assert top.rate is not None
    assert best.rate
    note = f"vs {best.system}" if len(names) > 1 else ""
    return Target(shown, goal, top.rate / best.rate, note=note)


def load_json(text: str) -> list[WorkloadResult]:
    """Workload results from a ``--json`` file's text."""
    document = json.loads(text)
    return [WorkloadResult.from_json(w) for w in document["workloads"]]
