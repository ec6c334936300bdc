"""``CommandTests``: the conformance tests of a verb of the ``episodata`` command.

A command plugin's test module subclasses it and names the class under test::

    class TestReportCommand(CommandTests[ReportCommand]):
        command_cls = ReportCommand

The packaging tests come with it; the verb must also appear in ``episodata --help``
and build its parser. What the verb does is for the plugin's own tests, through
``episodata_core.cli.main([...])`` or a real subprocess.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from episodata_core.commands import Arg, Command
from episodata_core.testing.packaging import PackagingTests

if TYPE_CHECKING:
    import pytest

    from episodata_core.registry import PluginKind

__all__ = ["CommandTests"]

C = TypeVar("C", bound=Command)


class CommandTests(PackagingTests, Generic[C]):
    """Conformance tests for a :class:`~episodata_core.commands.Command` plugin."""

    plugin_kind: ClassVar[PluginKind] = "command"
    command_cls: type[C]
    """The command class under test (set it in the subclass's body)."""

    @property
    def plugin_cls(self) -> type:
        """The class the packaging tests check: :attr:`command_cls`."""
        return self.command_cls

    def test_arguments_build_a_parser(self) -> None:
        arguments = self.command_cls.arguments
        assert isinstance(arguments, tuple)
        assert all(isinstance(a, Arg) for a in arguments), arguments
        parser = argparse.ArgumentParser(prog=f"episodata {self.command_cls.name}")
        for argument in arguments:
            parser.add_argument(*argument.flags, **argument.options)
        assert callable(self.command_cls().run)

    def test_listed_in_help_and_has_its_own(self, capsys: pytest.CaptureFixture[str]) -> None:
        from episodata_core.cli import main

        name = self.command_cls.name
        assert main(["--help"]) == 0
        assert re.search(rf"^    {re.escape(name)}\b", capsys.readouterr().out, re.MULTILINE)
        assert main([name, "--help"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: episodata {name}")
