"""``Dataset.refresh()`` never runs inside a read of another thread (a stream's read-ahead).

A refresh swaps what a stored backend reads from; a read of the read-ahead thread that
spans it saw zeros where rows should be (the concurrent-readers kit caught it, rarely).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from episodata import Dataset


def test_refresh_waits_for_a_read_under_way(tmp_path):
    episodes = [
        {"initial_observation": np.zeros(2), "observations": np.ones((20, 2)), "terminated": True}
        for _ in range(4)
    ]
    Dataset.from_episodes(episodes, path=str(tmp_path / "d"), backend="npz_directory").close()
    dataset = Dataset.open(tmp_path / "d", read_only=True)
    backend = dataset.backend
    reading = threading.Event()
    overlaps: list[str] = []
    gather = backend.gather_rows
    refresh = backend.refresh

    def slow_gather(request):  # type: ignore[no-untyped-def]
        reading.set()
        time.sleep(0.05)
        result = gather(request)
        reading.clear()
        return result

    def checked_refresh():  # type: ignore[no-untyped-def]
        if reading.is_set():
            overlaps.append("refresh ran inside a read")
        refresh()

    backend.gather_rows = slow_gather  # type: ignore[method-assign]
    backend.refresh = checked_refresh  # type: ignore[method-assign]
    stream = dataset.segment_stream(batch_size=2, sequence_length=4, seed=0, prefetch=1)
    batches = iter(stream)
    reader = threading.Thread(target=lambda: [next(batches) for _ in range(6)])
    reader.start()
    for _ in range(5):
        reading.wait(timeout=5)
        dataset.refresh()
    reader.join(timeout=30)
    stream.close()
    dataset.close()
    assert not overlaps
