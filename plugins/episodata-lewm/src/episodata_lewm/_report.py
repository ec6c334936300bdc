"""The LeWM import report; the shared importer helpers are in :mod:`episodata_core.importing`."""

from __future__ import annotations

from pydantic import Field

from episodata_core.transfer import ImportReport

__all__ = ["LeWMReport"]


class LeWMReport(ImportReport):
    """:class:`ImportReport` plus end reasons and finite last-row actions (formats.md §2.4)."""

    end_reasons: dict[str, int] = Field(
        default_factory=dict, description="Imported episodes by end_reason."
    )
    dangling_actions: int = Field(
        default=0,
        description="Episodes whose last-row action (taken after the last observation) is "
        "finite; it is dropped.",
    )

    def summary(self) -> str:
        """The core summary plus end reasons and dangling actions."""
        reasons = ", ".join(f"{k} {v}" for k, v in self.end_reasons.items())
        lines = [super().summary()]
        if reasons:
            lines.append(f"end reasons: {reasons}")
        if self.dangling_actions:
            lines.append(f"dangling last-row actions dropped: {self.dangling_actions}")
        return "\n".join(lines)
