"""`episodata quickstart` is an episodata.commands plugin of episodata-gym: the kit's checks."""

from __future__ import annotations

from episodata_core.testing import CommandTests
from episodata_gym._command import QuickstartCommand


class TestQuickstartCommand(CommandTests[QuickstartCommand]):
    command_cls = QuickstartCommand
