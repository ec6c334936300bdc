"""Verbs from ``episodata.commands`` plugins: found like every plugin kind, listed in --help."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from episodata_core import registry
from episodata_core.cli import main
from episodata_core.commands import Arg, arg
from episodata_core.errors import EpisodataPluginWarning

FAKE_DISTS = Path(__file__).resolve().parents[1] / "fake_dists"

pytestmark = pytest.mark.usefixtures("isolated_registry")


def _help(capsys) -> str:
    assert main(["--help"]) == 0
    return capsys.readouterr().out


def test_installed_command_plugins_are_verbs(capsys):
    # the workspace installs episodata-report and episodata-gym: their entry points, not
    # an import in the core, put the verbs there
    out = _help(capsys)
    assert re.search(r"^    report\s+write a self-contained HTML report.*$", out, re.MULTILINE)
    assert re.search(r"^    quickstart\n\s+record CartPole-v1 episodes", out, re.MULTILINE)
    assert "[episodata-report]" in out
    assert "[episodata-gym]" in out
    infos = {i.name: i for i in registry.list_plugins("command")}
    assert infos["report"].value == "episodata_report._command:ReportCommand"
    assert infos["quickstart"].distribution == "episodata-gym"


def test_core_does_not_import_the_command_plugins():
    source = Path(registry.__file__).parent / "cli"
    text = "\n".join(p.read_text(encoding="utf-8") for p in source.glob("*.py"))
    assert "episodata_report" not in text
    assert "episodata_gym" not in text


def test_a_fake_distribution_adds_a_verb_and_bad_ones_are_skipped(
    hermetic_registry, capsys, recwarn
):
    hermetic_registry(FAKE_DISTS / "commands")

    out = _help(capsys)

    verbs = re.findall(r"^    (\S+)", out, re.MULTILINE)
    assert verbs == [
        "info",
        "verify",
        "copy",
        "import",
        "export",
        "migrate",
        "pipeline",
        "plugins",
        "hello",
    ]
    messages = sorted(str(w.message) for w in recwarn if w.category is EpisodataPluginWarning)
    assert len(messages) == 4, messages
    assert re.search(r"command 'badargs' from episodata-fake-commands \(episodata_fake_commands:"
                     r"BadArgsCommand\) cannot be set up: ValueError: ", messages[0])  # fmt: skip
    assert re.search(r"command 'broken' from episodata-fake-commands 0.1 .*failed to import: "
                     r"ModuleNotFoundError", messages[1])  # fmt: skip
    assert "command 'info' from episodata-fake-commands is a verb of the core" in messages[2]
    assert "command 'misnamed' from episodata-fake-commands (episodata_fake_commands:" \
        "HelloCommand) declares name = 'hello'" in messages[3]  # fmt: skip
    # the one that loaded runs, with its own arguments and exit code
    assert main(["hello", "--who", "kit"]) == 3
    assert capsys.readouterr().out == "hello, kit\n"


def test_strict_plugins_makes_a_broken_command_a_one_line_error(
    hermetic_registry, capsys, monkeypatch
):
    hermetic_registry(FAKE_DISTS / "commands")
    monkeypatch.setenv("EPISODATA_STRICT_PLUGINS", "1")

    assert main(["hello"]) == 1

    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert re.match(r"episodata: error: command 'badargs' .* cannot be set up: ValueError", err)


def test_plugins_check_loads_command_plugins(hermetic_registry, capsys):
    hermetic_registry(FAKE_DISTS / "commands")

    with pytest.warns(EpisodataPluginWarning, match="skipped command plugin"):
        assert main(["plugins", "--kind", "command", "--check"]) == 1

    out = capsys.readouterr().out
    assert re.search(
        r"^hello\s+command\s+episodata-fake-commands==0.1\s+loaded$", out, re.MULTILINE
    )
    assert re.search(
        r"^broken\s+command\s+episodata-fake-commands==0.1\s+broken$", out, re.MULTILINE
    )


def test_runtime_registered_command_runs(capsys):
    @registry.register_command
    class Echo:
        name: ClassVar[str] = "echo"
        description: ClassVar[str] = "print the words back"
        arguments: ClassVar[tuple[Arg, ...]] = (arg("words", nargs="*"),)

        def run(self, args):
            print("|".join(args.words))
            return 0

    assert main(["echo", "a", "b"]) == 0
    assert capsys.readouterr().out == "a|b\n"
    assert re.search(r"^    echo\s+print the words back$", _help(capsys), re.MULTILINE)


def test_a_command_without_run_is_refused_at_registration():
    class NoRun:
        name = "norun"
        description = "nothing"
        arguments = ()

    with pytest.raises(registry.PluginError, match=r"does not satisfy the Command contract: "
                       r"missing 'run'"):  # fmt: skip
        registry.register_command(NoRun)


def test_a_well_known_verb_that_is_not_installed_says_how_to_install(capsys, monkeypatch):
    monkeypatch.setenv("EPISODATA_DISABLED_PLUGINS", "command.report")

    assert main(["report", "some/dataset"]) == 2

    assert capsys.readouterr().err == (
        "episodata: error: no command named 'report': it ships in episodata-report: "
        'pip install "episodata[report]"\n'
    )


def test_help_lists_plugin_verbs_in_a_real_subprocess():
    done = subprocess.run(
        [sys.executable, "-m", "episodata_core.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert (done.returncode, done.stderr) == (0, "")
    assert re.search(r"^    report\s", done.stdout, re.MULTILINE)
    assert re.search(r"^    quickstart\n", done.stdout, re.MULTILINE)
