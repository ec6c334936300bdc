"""The stable-worldmodel recordings in ``data/`` and the oracles that come with them.

Each recording (PushT, 4 episodes, ``World.collect``) was written by stable-worldmodel
itself, once by its 0.1.1 release (no reset row, its bug #293) and once by its fixed
upstream, as a Lance dataset (the default) and as an HDF5 file. ``<name>.expected.npz``
holds what an import must give, made by a separate script with pylance and Pillow;
``<name>.env-truth.npz`` what the env really did, logged by a wrapper inside the env.
"""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from episodata_core.testing import ExpectedEpisode, ExpectedImport

DATA = Path(__file__).parent / "data"
LANCE = ("pusht-swmmain.lance", "pusht-swm0.1.1.lance")
HDF5 = ("pusht-swmmain.h5", "pusht-swm0.1.1.h5")
IMAGES = ("goal", "pixels")
OBSERVATIONS = ("goal", "pixels", "proprio", "state")
# float32 in the Lance file, int64 in the env (and in the HDF5 file of the same run)
INTEGERS = ("id", "n_contacts")
MISSING_RESET = "swm_reset_frame_missing"


@dataclass(frozen=True)
class Recording:
    """One recording: its path, what an import must give, what the env did."""

    path: Path
    expected: Any  # NpzFile
    facts: dict[str, Any]
    truth: Any  # NpzFile

    @property
    def episodes(self) -> list[dict[str, Any]]:
        return list(self.facts["episodes"])

    @property
    def release(self) -> str:
        return "0.1.1" if "0.1.1" in self.path.name else "fixed"

    def rows(self, e: int, column: str) -> np.ndarray:
        """Episode e's rows of ``column`` in the expected file, size-1 lists squeezed."""
        values = self.expected[f"ep{e}/rows/{column}"]
        return values[:, 0] if values.ndim == 2 and values.shape[1] == 1 else values

    def columns(self, e: int) -> list[str]:
        prefix = f"ep{e}/rows/"
        return [k[len(prefix) :] for k in self.expected.files if k.startswith(prefix)]

    def blobs(self, e: int, column: str) -> list[bytes]:
        data = self.expected[f"ep{e}/jpeg/{column}/bytes"].tobytes()
        offsets = self.expected[f"ep{e}/jpeg/{column}/offsets"]
        return [data[a:b] for a, b in itertools.pairwise(offsets)]


def recording(name: str) -> Recording:
    path = DATA / name
    stem = name if name.endswith(".lance") else name.removesuffix(".h5")
    return Recording(
        path=path,
        expected=np.load(DATA / f"{stem}.expected.npz", allow_pickle=False),
        facts=json.loads((DATA / f"{stem}.expected.json").read_text()),
        truth=np.load(DATA / f"{stem}.env-truth.npz", allow_pickle=False),
    )


def lance_expected_import(name: str, **options: Any) -> ExpectedImport:
    """The kit's oracle of a Lance recording, from its expected file (decoded images)."""
    rec = recording(name)
    episodes = []
    for e, facts in enumerate(rec.episodes):
        consumed = {"action", "reward", "terminated", "truncated"}
        observations = {c: rec.rows(e, c) for c in OBSERVATIONS}
        infos = {
            c: rec.rows(e, c).astype(np.int64) if c in INTEGERS else rec.rows(e, c)
            for c in rec.columns(e)
            if c not in consumed and c not in OBSERVATIONS
        }
        episodes.append(
            ExpectedEpisode(
                observations=observations,
                actions={"action": rec.expected[f"ep{e}/action"]},
                rewards={"reward": rec.expected[f"ep{e}/reward"]},
                infos=infos,
                terminated=facts["terminated"],
                truncated=facts["truncated"],
            )
        )
    return ExpectedImport(
        episodes=episodes,
        options=options,
        report={"rows_read": int(rec.facts["lance"]["num_rows"]), "dangling_actions": 0},
        provenance={
            "source_episode": list(range(len(episodes))),
            "source_rows": [f["rows"] for f in rec.episodes],
            "source_row_offset": [f["offset"] for f in rec.episodes],
        },
        source={"container": "lance", "lance_version": 1, "swm_release": rec.release},
        warnings=frozenset({MISSING_RESET} if rec.release == "0.1.1" else set()),
    )


def writable_copy(name: str, directory: Path) -> Path:
    """A copy of a recording that a test may damage or add versions to."""
    target = directory / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(DATA / name, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def rewrite(name: str, directory: Path, out: str, change: Any) -> Path:
    """A new Lance dataset: the recording's table passed through ``change(table)``."""
    import lance

    table = lance.dataset(str(DATA / name)).to_table()
    target = directory / out
    if target.exists():
        shutil.rmtree(target)
    lance.write_dataset(change(table), str(target))
    return target
