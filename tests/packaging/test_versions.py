"""Every distribution is version 0.3.0, the successor of the published 0.2.0.

``pip install "episodata>=0.2"`` must pick ours wherever our wheels are offered, so the
metadata (pyproject.toml), the module's ``__version__`` and the meta distribution's pins
all say 0.3.0.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.3.0"
PROJECTS = sorted(
    [
        ROOT / "pyproject.toml",
        ROOT / "episodata_core" / "pyproject.toml",
        *(ROOT / "plugins").glob("*/pyproject.toml"),
    ]
)
# a third-party plugin keeps its own version; it only has to accept this core
THIRD_PARTY = sorted((ROOT / "contrib").glob("*/pyproject.toml"))


def _project(path: Path) -> dict[str, object]:
    project: dict[str, object] = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    return project


@pytest.mark.parametrize("path", PROJECTS, ids=lambda p: p.parent.name)
def test_every_distribution_is_0_3_0(path: Path) -> None:
    project = _project(path)
    assert project["version"] == VERSION
    name = str(project["name"])
    if name != "episodata":  # the meta distribution carries no module
        module = importlib.import_module(name.replace("-", "_"))
        assert module.__version__ == VERSION, f"{name}: __version__ disagrees with pyproject"


def test_the_meta_distribution_pins_its_own_version() -> None:
    project = _project(ROOT / "pyproject.toml")
    pins = list(project["dependencies"])  # type: ignore[call-overload]
    for extra in project["optional-dependencies"].values():  # type: ignore[attr-defined]
        pins += extra
    ours = [Requirement(pin) for pin in pins if pin.startswith("episodata")]
    assert ours
    for requirement in ours:
        assert str(requirement.specifier) == f"=={VERSION}", requirement
        assert requirement.specifier.contains(VERSION)
    assert Requirement("episodata>=0.2").specifier.contains(VERSION)


@pytest.mark.parametrize("path", THIRD_PARTY, ids=lambda p: p.parent.name)
def test_the_third_party_example_accepts_this_core(path: Path) -> None:
    pins = [Requirement(pin) for pin in _project(path)["dependencies"]]  # type: ignore[attr-defined]
    (core,) = [pin for pin in pins if pin.name == "episodata-core"]
    assert core.specifier.contains(VERSION), core
