"""The `episodata` command, in-process through main() and once as a real subprocess."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from episodata_core import __version__, registry
from episodata_core.cli import main
from episodata_core.errors import PluginConflictError

FAKE_DISTS = Path(__file__).resolve().parents[1] / "fake_dists"

pytestmark = pytest.mark.usefixtures("isolated_registry")


def _meta_version_line() -> str:
    try:
        return f"episodata {importlib.metadata.version('episodata')}"
    except importlib.metadata.PackageNotFoundError:
        return "episodata (the meta distribution) is not installed"


def test_version_prints_core_and_meta_distribution(capsys):
    assert main(["--version"]) == 0

    out = capsys.readouterr().out
    assert out.splitlines() == [f"episodata-core {__version__}", _meta_version_line()]


def test_plugins_prints_a_table(hermetic_registry, capsys):
    hermetic_registry(FAKE_DISTS / "basic")

    assert main(["plugins"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"NAME\s+KIND\s+DISTRIBUTION\s+STATUS", lines[0])
    assert [line.split() for line in lines[1:]] == [
        ["fake", "backend", "episodata-fake==0.1", "available"],
        ["fakeimp", "importer", "episodata-fake==0.1", "available"],
        ["fakehooks", "hook", "episodata-fake==0.1", "available"],
    ]
    assert "episodata_fake" not in sys.modules  # listing imports nothing


def test_plugins_filters_by_kind_and_shows_runtime_plugins(hermetic_registry, capsys):
    hermetic_registry(FAKE_DISTS / "basic")

    assert main(["plugins", "--kind", "importer"]) == 0

    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [
        "NAME",
        "fakeimp",
    ]


def test_plugins_explains_disabled_and_conflicting_plugins(hermetic_registry, capsys, monkeypatch):
    hermetic_registry(FAKE_DISTS / "basic")
    hermetic_registry(FAKE_DISTS / "conflict")
    monkeypatch.setenv("EPISODATA_DISABLED_PLUGINS", "hook.fakehooks")

    assert main(["plugins"]) == 0

    out = capsys.readouterr().out
    assert "\nhook 'fakehooks' (disabled): disabled by EPISODATA_DISABLED_PLUGINS" in out
    assert "\nbackend 'fake' (conflict): backend 'fake' is provided by episodata-fake 0.1" in out


def test_plugins_check_imports_each_plugin_and_fails_on_broken_ones(hermetic_registry, capsys):
    hermetic_registry(FAKE_DISTS / "basic")
    hermetic_registry(FAKE_DISTS / "broken")

    assert main(["plugins", "--check"]) == 1

    out = capsys.readouterr().out
    statuses = {line.split()[0]: line.split()[-1] for line in out.splitlines()[1:] if line}
    assert statuses["fake"] == "loaded"
    assert statuses["broken"] == "broken"
    assert statuses["incompatible"] == "broken"
    assert statuses["badargs"] == "broken"
    assert "backend 'incompatible' (broken): backend 'incompatible' from " in out


def test_nothing_installed(hermetic_registry, capsys):
    assert main(["plugins", "--kind", "exporter"]) == 0

    assert capsys.readouterr().out == "no exporter plugins installed\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plugins", "--kind", "engine"], "argument --kind: invalid choice: 'engine'"),
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_exit_2(capsys, argv, message):
    assert main(argv) == 2

    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], r"commands:\n  COMMAND\n    info\s+describe a stored dataset"),
        (["-h"], r"--version +show the versions of episodata-core and episodata"),
        (
            ["plugins", "--help"],
            r"--kind \{backend,sampler,importer,exporter,command,executor,hook\}",
        ),
    ],
)
def test_help_everywhere(capsys, argv, expected):
    assert main(argv) == 0

    assert re.search(expected, capsys.readouterr().out)


def test_episodata_error_is_one_line_on_stderr_with_exit_1(capsys, monkeypatch):
    def conflict(kind=None):
        raise PluginConflictError("backend 'x' is provided by a 1 and b 2.\nChoose one")

    monkeypatch.setattr(registry, "list_plugins", conflict)

    assert main(["plugins"]) == 1

    captured = capsys.readouterr()
    assert captured.err == (
        "episodata: error: backend 'x' is provided by a 1 and b 2. Choose one\n"
    )
    assert captured.out == ""


def test_real_subprocess_version_and_listing():
    version = subprocess.run(
        [sys.executable, "-m", "episodata_core.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    listing = subprocess.run(
        [sys.executable, "-m", "episodata_core.cli", "plugins", "--kind", "backend"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert (version.returncode, version.stderr) == (0, "")
    assert version.stdout.splitlines()[0] == f"episodata-core {__version__}"
    assert (listing.returncode, listing.stderr) == (0, "")
    memory = f"episodata-memory=={importlib.metadata.version('episodata-memory')}"
    assert re.search(
        rf"^memory\s+backend\s+{re.escape(memory)}\s+available$", listing.stdout, re.MULTILINE
    )
