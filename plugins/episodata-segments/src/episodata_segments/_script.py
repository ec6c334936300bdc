"""The archive's ``build_episodes.py`` and default ``README.md`` texts.

``build_episodes.py`` re-runs the export with the recorded options; the source paths are
its command-line arguments. Its header comment is the only place in an archive where
software versions appear, so every other file stays reproducible across upgrades.
"""

from __future__ import annotations

import json
import platform
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core import __version__

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_segments._manifest import ArchiveManifest

__all__ = ["build_script", "default_readme"]

_SCRIPT = '''#!/usr/bin/env python3
# Rebuilds this offset-segment archive with episodata.
# Written by episodata {episodata}, numpy {numpy}, Python {python}, zlib {zlib}.
"""Rebuild the archive: python build_episodes.py OUT LABEL=SOURCE [LABEL=SOURCE ...].

SOURCE is a label's original file, imported again with the importer and options
recorded below, or a stored episodata dataset folder (for labels without a recorded
import). Identical sources and options give identical manifests (formats.md, 3.9).
"""

from __future__ import annotations

import argparse
import json

import episodata

EXPORT_OPTIONS = json.loads({options})
IMPORTS = json.loads({imports})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="the archive folder to create")
    parser.add_argument("sources", nargs="+", metavar="LABEL=SOURCE")
    args = parser.parse_args()
    datasets = {{}}
    for item in args.sources:
        label, _, source = item.partition("=")
        if label not in IMPORTS:
            parser.error(f"unknown label {{label!r}}; the archive has {{sorted(IMPORTS)}}")
        recipe = IMPORTS[label]
        if recipe is None:
            datasets[label] = episodata.Dataset.open(source, read_only=True)
        else:
            datasets[label], _ = episodata.import_dataset(
                recipe["format"], source, None, **recipe["options"]
            )
    missing = sorted(set(IMPORTS) - set(datasets))
    if missing:
        parser.error(f"no SOURCE given for {{missing}}")
    episodata.export_datasets("offset-segments", datasets, args.out, **EXPORT_OPTIONS)


if __name__ == "__main__":
    main()
'''


def build_script(options: Mapping[str, Any], imports: Mapping[str, Any]) -> str:
    """The text of ``build_episodes.py`` for these export options and import recipes."""
    return _SCRIPT.format(
        episodata=__version__,
        numpy=np.__version__,
        python=platform.python_version(),
        zlib=zlib.ZLIB_RUNTIME_VERSION,
        options=repr(json.dumps(options, sort_keys=True, ensure_ascii=True, allow_nan=False)),
        imports=repr(json.dumps(imports, sort_keys=True, ensure_ascii=True, allow_nan=False)),
    )


def default_readme(manifest: ArchiveManifest) -> str:
    """A short dataset card for archives exported without ``readme=``."""
    k = manifest.offset
    example = manifest.environments[manifest.env_order[0]].segments[0].path
    lines = [
        f"# Offset-{k} segments: {', '.join(manifest.env_order)}",
        "",
        (
            f"{manifest.segments_total} trajectory segments, {manifest.episodes_per_env} per "
            f"environment. Each segment holds {k + 1} observations and exactly {k} actions; "
            f"the goal is the last observation, {k} steps after the first."
        ),
        "",
        (
            f"Sampling: numpy default_rng({manifest.seed}) per environment, "
            f"{manifest.episodes_per_env} distinct episodes with at least {k} transitions, "
            "then one uniform start per episode (formats.md 3.2 of episodata)."
        ),
        "",
        "Files:",
        "",
        "- episodes/ENV/episode_NNN.npz: one segment per file, loadable without pickle;",
        "- manifest.json: sources, fields, dtypes, sampling and segment coordinates;",
        "- manifest.jsonl: one row per segment, with paths relative to the archive root;",
        "- build_episodes.py: rebuilds the archive with episodata;",
        "- SHA256SUMS: checksums; run `sha256sum -c SHA256SUMS` in this folder.",
        "",
        "```python",
        "import numpy as np",
        f'with np.load("{example}", allow_pickle=False) as segment:',
        "    start_step = int(segment['start_step'])",
        "    goal_step = int(segment['goal_step'])",
        "```",
        "",
    ]
    return "\n".join(lines)
