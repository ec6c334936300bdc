"""Plugins import from the core only its declared plugin-author surface, and its helpers work."""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field

from episodata_core.authoring import (
    PLUGIN_SURFACE,
    Growable,
    check_fields,
    check_rows,
    coerce_options,
)
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.schema import FieldSpec

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_SOURCES = sorted(
    [*ROOT.glob("plugins/*/src/*/**/*.py"), *ROOT.glob("contrib/*/src/*/**/*.py")]
)


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _core_imports(path: Path) -> set[str]:
    """Every ``episodata_core`` module ``path`` imports, submodules resolved."""
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "episodata_core")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "episodata_core":
                continue
            found.add(node.module)
            for alias in node.names:  # `from episodata_core import location` is a module
                name = f"{node.module}.{alias.name}"
                if _is_module(name):
                    found.add(name)
    return found


@functools.cache
def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_the_surface_names_real_modules():
    assert all(_is_module(name) for name in PLUGIN_SURFACE)


def test_plugins_import_only_the_plugin_author_surface():
    assert len(PLUGIN_SOURCES) > 50  # the glob found the plugins
    outside = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in PLUGIN_SOURCES
        for module in _core_imports(path)
        if module not in PLUGIN_SURFACE
    }
    assert not outside, (
        "plugins import core modules outside episodata_core.authoring.PLUGIN_SURFACE "
        f"(use a module of the surface, or declare the module there): {sorted(outside)}"
    )


def test_plugins_never_import_the_facade():
    offenders = []
    for path in PLUGIN_SOURCES:
        for node in ast.walk(_tree(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "episodata"
            ]
    assert not offenders, offenders


# -- the helpers ---------------------------------------------------------------------------


def test_growable_matches_a_concatenation():
    rng = np.random.default_rng(0)
    grow = Growable((3,), np.dtype(np.float32), capacity=1)
    parts = []
    for step in range(40):
        if step % 3 == 0:
            block = rng.normal(size=(int(rng.integers(0, 7)), 3)).astype(np.float32)
            start = grow.extend(block)
        elif step % 3 == 1:
            block = np.zeros((int(rng.integers(0, 4)), 3), np.float32)
            start = grow.extend_zeros(len(block))
        else:
            block = rng.normal(size=(1, 3)).astype(np.float32)
            start = len(grow)
            grow.append(block[0])
        assert start == sum(len(p) for p in parts)
        parts.append(block)
    expected = np.concatenate(parts)
    np.testing.assert_array_equal(grow.view(), expected)
    assert grow.view().dtype == np.float32
    assert grow.nbytes == expected.nbytes
    assert np.shares_memory(grow.view(), grow.data)  # a view, not a copy
    grow.truncate(5)
    grow.resize(8)
    np.testing.assert_array_equal(grow.view(), np.concatenate([expected[:5], np.zeros((3, 3))]))


def test_growable_wraps_read_only_rows_and_copies_on_first_append():
    rows = np.arange(4, dtype=np.int64)
    rows.flags.writeable = False
    grow = Growable.wrap(rows)
    assert grow.view() is not rows
    assert np.shares_memory(grow.view(), rows)
    grow.append(9)
    np.testing.assert_array_equal(grow.view(), [0, 1, 2, 3, 9])
    np.testing.assert_array_equal(rows, [0, 1, 2, 3])


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    level: int = Field(default=1, alias="compression_level")


class _Other(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    level: int = Field(default=1, alias="compression_level")


def test_coerce_options_keeps_its_own_model_and_converts_another():
    mine = _Options(level=3)
    assert coerce_options(mine, _Options) is mine
    converted = coerce_options(_Other(level=7), _Options)
    assert type(converted) is _Options
    assert converted.level == 7


SPECS = {
    "observation/x": FieldSpec("x", shape=(2,), dtype="float32"),
    "action/a": FieldSpec("a", role="action", shape=(), dtype="int64"),
    "observation/depth": FieldSpec("depth", shape=(), dtype="float32", optional=True),
}


def test_check_rows_counts_and_names_what_is_wrong():
    rows = {"observation/x": np.zeros((4, 2)), "action/a": np.zeros(4)}
    assert check_rows(rows, SPECS, "episode 0") == 4
    with pytest.raises(
        SchemaError,
        match=r"^episode 2: rows have unknown fields \['observation/y'\] and lack required "
        r"fields \['action/a'\]$",
    ):
        check_rows({"observation/x": rows["observation/x"], "observation/y": rows["action/a"]},
                   SPECS, "episode 2")  # fmt: skip
    with pytest.raises(
        SchemaError, match=r"^a new episode: fields have different row counts \[3, 4\]$"
    ):
        check_rows({**rows, "observation/depth": np.zeros(3)}, SPECS, "a new episode")


def test_check_fields_raises_the_class_asked_for():
    check_fields(["b", "a"], {"a", "b"}, "episode 1")
    with pytest.raises(
        DatasetStateError,
        match=r"^episode 1: rows for \['a'\] do not match the episode's fields \['a', 'b'\]$",
    ):
        check_fields(["a"], ["a", "b"], "episode 1", error=DatasetStateError)


def test_growable_copy_of_owns_its_rows():
    rows = np.arange(6, dtype=np.int32).reshape(3, 2)
    grow = Growable.copy_of(rows, capacity=1)
    rows[0] = 99  # the caller may reuse its arrays
    grow.append([7, 8])
    np.testing.assert_array_equal(grow.view(), [[0, 1], [2, 3], [4, 5], [7, 8]])
    assert grow.view().dtype == np.int32
