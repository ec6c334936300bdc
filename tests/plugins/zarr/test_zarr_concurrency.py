"""A reader process samples with ``gather_rows`` while this process writes and flushes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _zarr_helpers import rows_of

from episodata_core.dataset import Dataset
from episodata_core.testing import example_schema

# Refreshes, then checks every window of a random batch against the rows the writer is
# known to write (built from the episode id): finalized or ongoing, any window must be
# exact, whatever the writer is doing at that moment.
_READER = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from _zarr_helpers import rows_of
from episodata_core.dataset import Dataset
from episodata_core.protocols import GatherRequest
from pathlib import Path

dataset = Dataset.open(sys.argv[2], read_only=True)
stop = Path(sys.argv[3])
rng = np.random.default_rng(0)
report = {"batches": 0, "episodes": [], "ongoing_windows": 0, "errors": []}
print("ready", flush=True)
while not stop.exists():
    dataset.refresh()
    table = dataset.backend.episode_table()
    report["episodes"].append(len(table))
    if not len(table):
        continue
    episodes = rng.integers(0, len(table), size=16)
    rows = table.length[episodes] + 1
    counts = np.minimum(rows, 3)
    starts = (rng.random(16) * (rows - counts + 1)).astype(np.int64)
    request = GatherRequest(episodes.astype(np.int64), starts, counts.astype(np.int64),
                            np.zeros(16, np.int64), 3, dataset.schema.qualified_keys)
    batch = dataset.backend.gather_rows(request)
    report["batches"] += 1
    report["ongoing_windows"] += int(table.ongoing[episodes].sum())
    for b, episode in enumerate(episodes.tolist()):
        expected = rows_of(dataset.schema, episode)
        s, c = int(starts[b]), int(counts[b])
        for key, values in batch.items():
            want = np.zeros_like(values[b])
            if key in expected:
                want[:c] = expected[key][s : s + c]
            if not np.array_equal(values[b], want):
                report["errors"].append(f"episode {episode} rows {s}+{c} field {key}")
dataset.close()
print(json.dumps(report), flush=True)
"""


def test_reader_process_sees_consistent_growing_data(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    stop = tmp_path / "stop"
    schema = example_schema()
    writer = Dataset.create(schema, folder, backend="zarr")
    backend = writer.backend
    backend.add_episode(rows_of(schema, 0), terminated=True, truncated=False)
    with subprocess.Popen(
        [sys.executable, "-c", _READER, str(Path(__file__).parent), str(folder), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    ) as reader:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "ready"
        rng = np.random.default_rng(1)
        ongoing: dict[int, int] = {}
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            if len(ongoing) < 3 and rng.random() < 0.3:
                episode = len(backend.episode_table())
                rows = rows_of(schema, episode)
                if rng.random() < 0.3:
                    backend.add_episode(rows, terminated=True, truncated=False)
                else:
                    backend.start_episode({k: v[:1] for k, v in rows.items()})
                    ongoing[episode] = 1
            elif ongoing:
                episode = int(rng.choice(sorted(ongoing)))
                rows = rows_of(schema, episode)
                done = ongoing[episode]
                if done < len(rows["observation/state"]):
                    backend.append_rows(episode, {k: v[done : done + 1] for k, v in rows.items()})
                    ongoing[episode] += 1
                else:
                    backend.finalize_episode(episode, terminated=True, truncated=False)
                    del ongoing[episode]
            if rng.random() < 0.2:
                writer.flush()
        written = len(backend.episode_table())
        writer.close()
        stop.touch()
        output, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0
    report = json.loads(output)
    assert report["errors"] == []
    assert report["batches"] >= 5
    seen = report["episodes"]
    assert seen == sorted(seen)  # never goes back
    assert seen[0] < seen[-1] <= written  # and sees new episodes after refreshing
    assert report["ongoing_windows"] > 0
