"""Command plugins for the CLI discovery tests: one good, four that must be skipped."""

from __future__ import annotations

from typing import ClassVar

from episodata_core.commands import Arg, arg


class HelloCommand:
    name: ClassVar[str] = "hello"
    description: ClassVar[str] = "greet someone"
    arguments: ClassVar[tuple[Arg, ...]] = (arg("--who", default="world"),)

    def run(self, args):
        print(f"hello, {args.who}")
        return 3  # an exit code no core verb returns, so the test sees it came from here


class InfoCommand(HelloCommand):
    name: ClassVar[str] = "info"  # a core verb: a plugin may not take it


class BadArgsCommand(HelloCommand):
    name: ClassVar[str] = "badargs"
    # argparse refuses a type that is not callable
    arguments: ClassVar[tuple[Arg, ...]] = (arg("--n", type="int"),)
