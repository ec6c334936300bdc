"""Fenced code blocks of the Markdown documents, and how the docs tests run them.

A block is executed according to its info string: ``python`` blocks run in one
namespace per document, in order, and ``bash`` blocks run in a subprocess. ``text``,
``toml`` and ``json`` blocks are shown, not run. Any other info string (or none) is an
error, so that every block says what it is. ``<!-- no-run -->`` on the line right
before a block skips it; it is meant only for commands that cannot run in a test, or that
another test runs where they belong (``<!-- no-run: the test that runs it -->``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

PYTHON = frozenset({"python"})
SHELL = frozenset({"bash"})
SHOWN = frozenset({"text", "toml", "json"})
NO_RUN = "<!-- no-run -->"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its language, its code and its marker."""

    document: str
    line: int  # 1-based line of the first code line
    language: str
    code: str
    marker: str | None  # the line right before the opening fence, when it is a comment

    @property
    def where(self) -> str:
        """``README.md:42``: the document and the first code line."""
        return f"{self.document}:{self.line}"

    @property
    def first_line(self) -> str:
        """The first non-blank code line (identifies a block across edits)."""
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")

    @property
    def no_run(self) -> bool:
        """Whether the block opted out with ``<!-- no-run -->``."""
        return self.marker is not None and (
            self.marker == NO_RUN or self.marker.startswith(NO_RUN.removesuffix(" -->") + ":")
        )


def documents() -> list[Path]:
    """README.md and every Markdown file of docs/, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse(path: Path) -> list[Block]:
    """Every fenced block of ``path``; nested or indented fences are handled."""
    lines = path.read_text(encoding="utf-8").splitlines()
    name = str(path.relative_to(ROOT))
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        indent, fence = match["indent"], match["fence"]
        language = match["info"].strip().split(" ")[0].lower()
        previous = lines[index - 1].strip() if index else ""
        marker = previous if previous.startswith("<!--") else None
        body: list[str] = []
        end = index + 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        while end < len(lines) and not closing.match(lines[end]):
            line = lines[end]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            end += 1
        if end == len(lines):
            raise ValueError(f"{name}:{index + 1}: the fenced block is never closed")
        blocks.append(Block(name, index + 2, language, "\n".join(body) + "\n", marker))
        index = end + 1
    return blocks


def shell_environment(shim_dir: Path) -> dict[str, str]:
    """The environment of bash blocks: the venv's bin, then a ``uv`` shim, first on PATH.

    The shim runs ``uv run [OPTIONS] CMD ...`` as ``CMD ...`` from the venv, so README
    commands such as ``uv run --no-dev --extra gym episodata quickstart`` run in the
    temporary folder without touching the project (the options choose what uv installs,
    and the test venv has everything); any other ``uv`` use fails loudly.
    """
    shim_dir.mkdir(parents=True, exist_ok=True)
    shim = shim_dir / "uv"
    shim.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = run ]; then\n'
        "  shift\n"
        '  while [ "${1:-}" != "${1#-}" ]; do\n'
        '    case "$1" in --extra|--group|--with|--package) shift 2 ;; *) shift ;; esac\n'
        "  done\n"
        '  exec "$@"\n'
        "fi\n"
        "echo \"docs tests: only 'uv run CMD' is available here, got: uv $*\" >&2\n"
        "exit 97\n"
    )
    shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(BIN), str(shim_dir), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(BIN.parent)
    env["MPLBACKEND"] = "Agg"
    env.pop("PYTHONPATH", None)
    return env


def run_shell(block: Block, cwd: Path, env: dict[str, str], timeout: float = 300) -> None:
    """Run a bash block with ``set -euo pipefail``; raise with its output on failure."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{block.where}: bash block exited with {result.returncode}\n--- code\n{block.code}"
            f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
        )


def run_python(block: Block, namespace: dict[str, object]) -> None:
    """Execute a python block in ``namespace``; tracebacks point at the document lines."""
    source = "\n" * (block.line - 1) + block.code
    exec(compile(source, block.document, "exec"), namespace)  # noqa: S102 (runs the docs)
