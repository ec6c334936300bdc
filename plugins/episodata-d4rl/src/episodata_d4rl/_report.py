"""The D4RL import report; the shared importer helpers are in :mod:`episodata_core.importing`."""

from __future__ import annotations

from pydantic import Field

from episodata_core.transfer import ImportReport

__all__ = ["D4RLReport"]


class D4RLReport(ImportReport):
    """:class:`ImportReport` plus how the imported episodes ended."""

    end_reasons: dict[str, int] = Field(
        default_factory=dict, description="Imported episodes by end_reason (formats.md §1.4)."
    )

    def summary(self) -> str:
        """The core summary plus one line of end reasons."""
        reasons = ", ".join(f"{k} {v}" for k, v in self.end_reasons.items())
        return super().summary() + (f"\nend reasons: {reasons}" if reasons else "")
