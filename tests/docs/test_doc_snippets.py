"""Every fenced code block of README.md and docs/*.md runs, so the documents cannot rot.

One test per document: its python blocks share one namespace and run in order, in a
fresh temporary folder; its bash blocks run there too, with the venv's bin first on
PATH and the repository's ``contrib/`` linked in (its example pipelines run with
``--workdir``, so nothing is written into the repository). See ``_doc_blocks`` for which blocks run and the ``<!-- no-run -->`` marker.
"""

from __future__ import annotations

import gc
import re
from typing import TYPE_CHECKING

import pytest
from _doc_blocks import (
    NO_RUN,
    PYTHON,
    ROOT,
    SHELL,
    SHOWN,
    Block,
    documents,
    parse,
    run_python,
    run_shell,
    shell_environment,
)

if TYPE_CHECKING:
    from pathlib import Path


def _blocks(path: Path) -> list[Block]:
    return parse(path)


def _ids() -> list[str]:
    return [str(path.relative_to(ROOT)) for path in documents()]


def test_every_document_is_found() -> None:
    names = _ids()
    assert names[0] == "README.md"
    for name in ("docs/getting_started.md", "docs/api.md", "docs/formats.md"):
        assert name in names


@pytest.mark.parametrize("path", documents(), ids=_ids())
def test_blocks_declare_what_they_are(path: Path) -> None:
    for block in _blocks(path):
        assert block.language in PYTHON | SHELL | SHOWN, (
            f"{block.where}: fenced block with info string {block.language!r}; use python "
            f"or bash (run by the tests) or one of {sorted(SHOWN)} (shown only)"
        )
        if block.no_run:
            assert block.language in PYTHON | SHELL, f"{block.where}: {NO_RUN} on a shown block"


@pytest.mark.parametrize("path", documents(), ids=_ids())
def test_document_runs(
    path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated_registry: None,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "contrib").symlink_to(ROOT / "contrib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    env = shell_environment(tmp_path / ".docs-bin")
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in _blocks(path):
        if block.language not in PYTHON | SHELL or block.no_run:
            continue
        try:
            if block.language in PYTHON:
                run_python(block, namespace)
            else:
                run_shell(block, tmp_path, env)
        except Exception as err:
            raise AssertionError(f"{block.where} failed: {err!r}") from err
    # streams and datasets the document left open are released here, not in a later test
    namespace.clear()
    gc.collect()


# documents that other people write; links to them are checked once they exist
WRITTEN_ELSEWHERE: frozenset[str] = frozenset()
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


@pytest.mark.parametrize("path", documents(), ids=_ids())
def test_relative_links_resolve(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    problems = []
    for target in _LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        name = str(linked.relative_to(ROOT)) if linked.is_relative_to(ROOT) else str(linked)
        if not linked.exists():
            if name not in WRITTEN_ELSEWHERE:
                problems.append(f"{target}: no such file")
            continue
        if anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            problems.append(f"{target}: no heading with anchor #{anchor} in {name}")
    assert not problems, f"{path.name}: " + "; ".join(problems)
