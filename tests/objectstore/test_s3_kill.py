"""A writer SIGKILLed on S3 leaves no torn commit; its lease expires and the next recovers."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _s3_helpers import SCHEMA, assert_same_episodes, big_episode, oracle

from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError

LEASE = 2.0
SLOW_ON_MOTO = True  # the SeaweedFS runs are in the default run, these under -m slow
_WRITER = Path(__file__).with_name("_s3_writer.py")


def _run_until(mode: str, url: str, options: dict, word: str, count: int) -> int:
    """Start a writer, SIGKILL it once it printed ``word N`` with N >= count.

    Returns the last N it printed before it died.
    """
    child = subprocess.Popen(
        [sys.executable, str(_WRITER), mode, url, json.dumps(options)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=_WRITER.parent,
    )
    last = -1
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(word):
                last = int(line.split()[1])
                if last >= count:
                    break
        else:
            pytest.fail(f"the {mode} writer ended before printing {word} {count}")
        # a little later: the kill lands anywhere in the next commit or between commits
        time.sleep(random.uniform(0, 0.05))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            # what it printed before the kill but this process had not read yet
            for line in child.stdout.read().splitlines():
                if line.startswith(word):
                    last = int(line.split()[1])
            child.stdout.close()
    return last


def test_a_bulk_write_killed_leaves_no_torn_commit_and_is_replaced(bucket):
    options = {**bucket.options, "lease_seconds": LEASE}
    url = bucket.url()
    handed = _run_until("bulk", url, options, "yielded", random.randint(6, 12))
    killed = time.monotonic()
    with pytest.raises(DatasetStateError, match="incomplete"):
        Dataset.open(url, storage_options=options)
    # what the killed write committed is a prefix of what it was given, bit-identical
    partial = Dataset.open(url, storage_options=options, read_only=True, allow_incomplete=True)
    kept = partial.num_episodes
    assert kept <= handed + 1
    assert_same_episodes(partial, oracle([big_episode(n) for n in range(kept)]))
    partial.close()
    # its lease is still live: a new bulk write is refused, naming the dead holder
    if time.monotonic() - killed < LEASE * 0.5:
        with pytest.raises(DatasetStateError, match="being written by"):
            Dataset.from_episodes([big_episode(0)], SCHEMA, url, storage_options=options)
    time.sleep(max(0.0, LEASE + 0.2 - (time.monotonic() - killed)))
    items = [big_episode(n) for n in range(5)]
    Dataset.from_episodes(items, SCHEMA, url, storage_options=options).close()
    again = Dataset.open(url, storage_options=options, read_only=True)
    assert_same_episodes(again, oracle(items))
    assert again.backend.verify() == []
    again.close()


def test_an_online_writer_killed_keeps_every_flushed_episode(bucket):
    options = {**bucket.options, "lease_seconds": LEASE}
    url = bucket.url()
    flushed = _run_until("online", url, options, "flushed", random.randint(2, 3) * 3)
    killed = time.monotonic()
    reader = Dataset.open(url, storage_options=options, read_only=True)
    kept = reader.num_episodes
    # committed at flush only: the last flush it reported, or the one it was inside
    assert kept in (flushed, flushed + 3)
    assert_same_episodes(reader, oracle([big_episode(n) for n in range(kept)]))
    reader.close()
    writer = Dataset.open(url, storage_options=options)
    if time.monotonic() - killed < LEASE * 0.5:
        with pytest.raises(DatasetStateError, match="being written by"):
            writer.add_episode(big_episode(kept))
    time.sleep(max(0.0, LEASE + 0.2 - (time.monotonic() - killed)))
    writer.add_episode(big_episode(kept))
    writer.close()
    after = Dataset.open(url, storage_options=options, read_only=True)
    assert_same_episodes(after, oracle([big_episode(n) for n in range(kept + 1)]))
    assert after.backend.verify() == []
    after.close()
