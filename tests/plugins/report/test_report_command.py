"""`episodata report` is an episodata.commands plugin of episodata-report: the kit's checks."""

from __future__ import annotations

from episodata_core.testing import CommandTests
from episodata_report._command import ReportCommand


class TestReportCommand(CommandTests[ReportCommand]):
    command_cls = ReportCommand
    # matplotlib draws the histograms: it loads when the verb runs, not when it is listed
    heavy_modules = (*CommandTests.heavy_modules, "matplotlib")
