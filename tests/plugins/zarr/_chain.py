"""Kill chains: one Zarr dataset, a writer process SIGKILLed again and again.

Each round starts a writer process on the same folder; it resumes the ongoing episodes
it recovers, then appends episodes of very different lengths (so that after a kill the
next write of a chunk is often shorter than the one that was cut off), some whole, some
step by step with flushes, and prints the id of each episode once its finalizing call
returned. It is killed at a random instant (sometimes while it starts up and recovers).
Then this process reopens the folder, checks that every episode reported finalized
reads back bit-identical to :func:`chain_rows` (an independent oracle: the rows follow
from the episode id), that ``verify`` is clean, and appends one episode itself.

Only NumPy and episodata-zarr are imported here, so a writer process starts quickly.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_zarr import ZarrBackend, ZarrOptions

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(4,), dtype="float32"),
        FieldSpec("camera", shape=(3, 8, 8), dtype="uint8", layout="CHW"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)
# a few episodes per chunk, so commits keep rewriting partly filled chunks
OPTIONS: dict[str, Any] = {"chunk_bytes": 8 << 10}
_LENGTHS = (1, 3, 12, 40, 150, 400)


def chain_rows(episode: int) -> dict[str, Any]:
    """The rows of episode ``episode`` of a chain; incompressible, so sizes follow lengths."""
    rng = np.random.default_rng([episode, 17])
    count = 1 + int(rng.choice(_LENGTHS))
    rows = {
        "observation/state": rng.standard_normal((count, 4), dtype=np.float32),
        "observation/camera": rng.integers(0, 256, size=(count, 3, 8, 8), dtype=np.uint8),
        "action/action": rng.integers(0, 2, size=count).astype(np.int64),
        "reward/reward": rng.standard_normal(count, dtype=np.float32),
    }
    rows["action/action"][0], rows["reward/reward"][0] = 0, 0  # the reset row has none
    return rows


_WRITER = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from _chain import chain_rows
from episodata_zarr import ZarrBackend, ZarrOptions

backend = ZarrBackend.open(sys.argv[2], ZarrOptions(), writable=True)
rng = np.random.default_rng(int(sys.argv[3]))
table = backend.episode_table()
for episode in np.flatnonzero(table.ongoing).tolist():
    rows, done = chain_rows(episode), int(table.length[episode]) + 1
    if done < len(rows["reward/reward"]):
        backend.append_rows(episode, {k: v[done:] for k, v in rows.items()})
    backend.finalize_episode(episode, terminated=True, truncated=False)
    print(episode, flush=True)
print("ready", flush=True)
while True:
    episode = len(backend.episode_table())
    rows = chain_rows(episode)
    count = len(rows["reward/reward"])
    if rng.random() < 0.7:
        backend.add_episode(rows, terminated=True, truncated=False)
    else:
        backend.start_episode({k: v[:1] for k, v in rows.items()})
        done = 1
        while done < count:
            step = int(rng.integers(1, 60))
            backend.append_rows(episode, {k: v[done : done + step] for k, v in rows.items()})
            done += step
            if rng.random() < 0.5:
                backend.flush()
        backend.finalize_episode(episode, terminated=True, truncated=False)
    print(episode, flush=True)
"""


@dataclass
class ChainReport:
    """What one chain did: kills, episodes checked after each, and failures (must be 0)."""

    kills: int = 0
    checked: int = 0  # episodes compared, summed over rounds
    finalized: set[int] = field(default_factory=set)  # reported finalized
    lost: list[str] = field(default_factory=list)
    reopen_failures: list[str] = field(default_factory=list)


def _check(folder: Path, finalized: set[int], report: ChainReport) -> None:
    """Reopen (read-only, then writable), compare every reported episode, append one."""
    try:
        reader = ZarrBackend.open(str(folder), ZarrOptions(), writable=False)
        seen = len(reader.episode_table())
        reader.close()
        backend = ZarrBackend.open(str(folder), ZarrOptions(), writable=True)
    except Exception as err:  # noqa: BLE001 - every failure to reopen is counted, with why
        report.reopen_failures.append(f"after kill {report.kills}: {type(err).__name__}: {err}")
        return
    try:
        table = backend.episode_table()
        assert len(table) == seen, "the writable open sees other episodes than a reader"
        for episode in sorted(finalized):
            expected = chain_rows(episode)
            report.checked += 1
            where = f"after kill {report.kills}: episode {episode}"
            if episode >= len(table) or table.ongoing[episode]:
                report.lost.append(f"{where}: missing or not finalized")
                continue
            try:
                count = int(table.length[episode]) + 1
                stored = backend.read_rows(episode, 0, count, list(expected))
            except Exception as err:  # noqa: BLE001 - a failed read is a lost episode
                report.lost.append(f"{where}: {err}")
                continue
            if any(not np.array_equal(stored[k], v) for k, v in expected.items()):
                report.lost.append(f"{where}: reads back different rows")
        problems = backend.verify()
        if problems:
            report.lost.append(f"after kill {report.kills}: verify: {problems[:3]}")
        episode = len(table)
        backend.add_episode(chain_rows(episode), terminated=True, truncated=False)
        finalized.add(episode)
    finally:
        backend.close()


def run_chain(folder: Path, kills: int, seed: int, **options: Any) -> ChainReport:
    """Create a dataset in ``folder`` and kill a writer on it ``kills`` times."""
    ZarrBackend.create(SCHEMA, str(folder), ZarrOptions(**{**OPTIONS, **options})).close()
    rng = np.random.default_rng(seed)
    report = ChainReport()
    here = str(Path(__file__).parent)
    for kill in range(kills):
        command = [sys.executable, "-c", _WRITER, here, str(folder), str(seed * 1000 + kill)]
        lines: list[str] = []
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
            assert process.stdout is not None
            if rng.random() < 0.2:
                # anywhere from start-up through recovery to the first commits
                time.sleep(float(rng.uniform(0.2, 1.5)))
            else:
                while (line := process.stdout.readline()) and line.strip() != "ready":
                    lines.append(line)
                time.sleep(float(rng.uniform(0.02, 0.6)))
            process.send_signal(signal.SIGKILL)
            lines += process.communicate()[0].split()
        report.kills += 1
        report.finalized |= {int(line) for line in lines if line.strip().isdigit()}
        _check(folder, report.finalized, report)
    return report
