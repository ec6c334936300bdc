"""docs/api.md is exactly what tools/gen_api_docs.py generates from the code.

The reference is generated from signatures and docstrings; this test fails when the
committed page differs, so it cannot drift. Fix a failure by regenerating:
``uv run python tools/gen_api_docs.py``.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from typing import TYPE_CHECKING

from _doc_blocks import ROOT

if TYPE_CHECKING:
    from types import ModuleType

import episodata

GENERATOR = ROOT / "tools" / "gen_api_docs.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_docs", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_api_docs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current() -> None:
    generated, _thin = _generator().render()
    committed = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    if committed != generated:
        diff = "\n".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(),
                    generated.splitlines(),
                    "docs/api.md",
                    "generated",
                    lineterm="",
                )
            )[:60]
        )
        raise AssertionError(
            f"docs/api.md is out of date; run: uv run python tools/gen_api_docs.py\n{diff}"
        )


def test_every_public_name_is_documented() -> None:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    headings = {line.split("`")[1] for line in text.splitlines() if line.startswith("#### `")}
    missing = [name for name in episodata.__all__ if name not in headings]
    assert not missing, f"names of episodata.__all__ missing from docs/api.md: {missing}"
    for name in ("schema_from_gym_spaces", "record_episodes", "batch_to_tensordict"):
        assert name in headings
    for verb in (
        "quickstart",
        "info",
        "verify",
        "copy",
        "import",
        "export",
        "pipeline",
        "plugins",
        "report",
    ):
        assert f"### `episodata {verb}`" in text, verb


def test_generation_is_deterministic() -> None:
    generator = _generator()
    assert generator.render()[0] == generator.render()[0]


def test_no_object_repr_leaks_into_the_reference() -> None:
    # a slot or descriptor documented by its repr ("<member 'index' of 'Episode' objects>")
    # tells the reader nothing: give it a property with a docstring instead
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    leaks = [line for line in text.splitlines() if "<member '" in line or " object at 0x" in line]
    assert not leaks, leaks
