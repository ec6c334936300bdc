"""`import episodata` pulls in no heavy dependency, reads no entry point, imports no plugin."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = (
    "tensorstore",
    "zarr",
    "h5py",
    "hdf5plugin",
    "torch",
    "tensordict",
    "gymnasium",
    "lance",
    "pyarrow",
    "PIL",
    "ray",
)

# Runs in a fresh interpreter: count entry-point reads from the very start, then import.
PROBE = textwrap.dedent(
    """
    import importlib.metadata
    import json
    import sys

    HEAVY = {heavy!r}
    reads = []
    read_entry_points = importlib.metadata.entry_points

    def counting_entry_points(**params):
        # pydantic reads its own "pydantic" group when the first model is built; only
        # reads that can see episodata's groups count
        group = params.get("group")
        if group is None or group.startswith("episodata"):
            reads.append(group or "<every group>")
        return read_entry_points(**params)

    importlib.metadata.entry_points = counting_entry_points

    def snapshot():
        return {{
            "heavy": sorted(m for m in HEAVY if m in sys.modules),
            "reads": list(reads),
        }}

    import {module}
    import episodata_core.cli
    import episodata_core.hooks
    import episodata_core.registry
    after_import = snapshot()

    infos = episodata_core.registry.list_plugins()
    # the core's own samplers are part of episodata-core, imported with it by design
    plugin_modules = sorted({{
        i.value.split(":")[0]
        for i in infos
        if i.distribution and i.distribution != "episodata-core"
    }})
    after_listing = snapshot()
    after_listing["plugins"] = [i.name for i in infos]
    after_listing["imported_plugin_modules"] = [m for m in plugin_modules if m in sys.modules]
    print(json.dumps({{"after_import": after_import, "after_listing": after_listing}}))
    """
)


def _probe(module: str) -> dict[str, dict[str, list[str]]]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY, module=module)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", ["episodata", "episodata_core"])
def test_import_is_light_and_reads_no_entry_points(module):
    found = _probe(module)

    assert found["after_import"] == {"heavy": [], "reads": []}
    listing = found["after_listing"]
    assert listing["heavy"] == []
    assert listing["reads"] == ["<every group>"]  # read once, for every group at a time
    assert "memory" in listing["plugins"]  # the probe did see installed plugins
    assert listing["imported_plugin_modules"] == []


def test_gymnasium_is_installed_so_the_probe_can_fail():
    # the heavy check means something only if at least one heavy library is importable
    import importlib.util

    assert importlib.util.find_spec("gymnasium") is not None
