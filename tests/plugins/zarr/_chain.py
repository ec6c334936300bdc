"""Kill chains: one Zarr dataset, a writer process SIGKILLed again and again.

Each round starts a writer process on the same folder; it resumes the ongoing episodes
it recovers, then appends episodes of very different lengths, some whole, some step by
step with flushes, and reports each episode once its finalizing call returned. It is
killed at a random instant (sometimes while it starts up and recovers). Then this
process reopens the folder, checks that every episode reported finalized reads back
bit-identical to :func:`chain_rows` (an independent oracle: the rows follow from the
episode id and the round that wrote it), that flushed ongoing episodes hold a prefix of
theirs, that ``verify`` is clean, and appends one episode itself.

Each round writes other rows under the same ids (the rows depend on the round), so the
write that replaces one cut off by a kill is usually of another size: a stale tail of
the killed write (issue 12) then shows.

Only NumPy and episodata-zarr are imported here, so a writer process starts quickly.
"""

from __future__ import annotations

import json
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
        FieldSpec("camera", shape=(3, 16, 16), dtype="uint8", layout="CHW"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)
# default chunks (256 KiB, 341 rows of these): every commit rewrites a large, partly
# filled chunk per field, so kills often land in a write. On the code before the fix,
# 5 of 6 chains of 10 kills lost episodes this way (2 of 6 with 8 KiB chunks)
OPTIONS: dict[str, Any] = {}
_LENGTHS = (1, 3, 12, 40, 150, 400)


def chain_rows(episode: int, variant: int) -> dict[str, Any]:
    """The rows of episode ``episode`` written by round ``variant`` (incompressible)."""
    rng = np.random.default_rng([episode, variant, 17])
    count = 1 + int(rng.choice(_LENGTHS))
    rows = {
        "observation/state": rng.standard_normal((count, 4), dtype=np.float32),
        "observation/camera": rng.integers(0, 256, size=(count, 3, 16, 16), dtype=np.uint8),
        "action/action": rng.integers(0, 2, size=count).astype(np.int64),
        "reward/reward": rng.standard_normal(count, dtype=np.float32),
    }
    rows["action/action"][0], rows["reward/reward"][0] = 0, 0  # the reset row has none
    return rows


# argv: tests folder, dataset, seed, this round's variant, JSON {ongoing id: its variant}
_WRITER = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from _chain import chain_rows
from episodata_zarr import ZarrBackend, ZarrOptions

backend = ZarrBackend.open(sys.argv[2], ZarrOptions(), writable=True)
rng = np.random.default_rng(int(sys.argv[3]))
variant, started = int(sys.argv[4]), json.loads(sys.argv[5])
table = backend.episode_table()
for episode in np.flatnonzero(table.ongoing).tolist():
    old = started[str(episode)]
    rows, done = chain_rows(episode, old), int(table.length[episode]) + 1
    if done < len(rows["reward/reward"]):
        backend.append_rows(episode, {k: v[done:] for k, v in rows.items()})
    backend.finalize_episode(episode, terminated=True, truncated=False)
    print("final", episode, old, flush=True)
print("ready", flush=True)
while True:
    episode = len(backend.episode_table())
    rows = chain_rows(episode, variant)
    count = len(rows["reward/reward"])
    if rng.random() < 0.7:
        backend.add_episode(rows, terminated=True, truncated=False)
    else:
        print("start", episode, variant, flush=True)  # before: a flush may outlive us
        backend.start_episode({k: v[:1] for k, v in rows.items()})
        done = 1
        while done < count:
            step = int(rng.integers(1, 60))
            backend.append_rows(episode, {k: v[done : done + step] for k, v in rows.items()})
            done += step
            if rng.random() < 0.5:
                backend.flush()
        backend.finalize_episode(episode, terminated=True, truncated=False)
    print("final", episode, variant, flush=True)
"""


@dataclass
class ChainReport:
    """What one chain did: kills, episodes checked after each, and failures (must be 0)."""

    kills: int = 0
    checked: int = 0  # episodes compared, summed over rounds
    finalized: dict[int, int] = field(default_factory=dict)  # reported finalized: variant
    started: dict[int, int] = field(default_factory=dict)  # episode -> variant, ongoing ones
    lost: list[str] = field(default_factory=list)
    reopen_failures: list[str] = field(default_factory=list)


def _check(folder: Path, report: ChainReport, *, append: bool = True) -> None:
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
        ongoing = {int(e) for e in np.flatnonzero(table.ongoing)}
        for episode in sorted(set(report.finalized) | ongoing):
            where = f"after kill {report.kills}: episode {episode}"
            report.checked += 1
            if episode >= len(table) or (episode in report.finalized and episode in ongoing):
                report.lost.append(f"{where}: reported finalized, but missing or ongoing")
                continue
            variant = report.finalized.get(episode, report.started.get(episode))
            if variant is None:
                report.lost.append(f"{where}: an ongoing episode no writer started")
                continue
            expected = chain_rows(episode, variant)
            count = int(table.length[episode]) + 1
            if episode not in ongoing and count != len(expected["reward/reward"]):
                report.lost.append(f"{where}: {count} rows instead of all")
                continue
            try:
                stored = backend.read_rows(episode, 0, count, list(expected))
            except Exception as err:  # noqa: BLE001 - a failed read is a lost episode
                report.lost.append(f"{where}: {err}")
                continue
            if any(not np.array_equal(stored[k], v[:count]) for k, v in expected.items()):
                report.lost.append(f"{where}: reads back other rows")
        problems = backend.verify()
        if problems:
            report.lost.append(f"after kill {report.kills}: verify: {problems[:3]}")
        if append:
            episode = len(table)
            backend.add_episode(chain_rows(episode, 0), terminated=True, truncated=False)
            report.finalized[episode] = 0
    finally:
        backend.close()


def run_chain(folder: Path, kills: int, seed: int, **options: Any) -> ChainReport:
    """Create a dataset in ``folder`` and kill a writer on it ``kills`` times."""
    ZarrBackend.create(SCHEMA, str(folder), ZarrOptions(**{**OPTIONS, **options})).close()
    rng = np.random.default_rng(seed)
    report = ChainReport()
    here = str(Path(__file__).parent)
    for kill in range(kills):
        started = json.dumps(report.started)
        variant = kill + 1  # the parent's own episodes are variant 0
        command = [sys.executable, "-c", _WRITER, here, str(folder), str(seed * 1000 + kill)]
        lines: list[str] = []
        with subprocess.Popen(
            [*command, str(variant), started], stdout=subprocess.PIPE, text=True
        ) as process:
            assert process.stdout is not None
            if rng.random() < 0.2:
                # anywhere from start-up through recovery to the first commits
                time.sleep(float(rng.uniform(0.2, 1.5)))
            else:
                while (line := process.stdout.readline()) and line.strip() != "ready":
                    lines.append(line)
                time.sleep(float(rng.uniform(0.02, 0.6)))
            process.send_signal(signal.SIGKILL)
            lines += process.communicate()[0].splitlines()
        report.kills += 1
        for line in lines:
            match line.split():
                case ["final", episode, variant_of]:
                    report.finalized[int(episode)] = int(variant_of)
                case ["start", episode, variant_of]:
                    report.started[int(episode)] = int(variant_of)
        _check(folder, report)
    _check(folder, report, append=False)  # the last append, into what the last kill left
    return report
