"""A writer process for the kill tests: ``python _s3_writer.py MODE URL OPTIONS_JSON``.

``bulk``: one ``from_episodes`` of many episodes in small batches (a commit each),
printing ``yielded N`` as it hands out episode N. ``online``: ``add_episode`` one by
one with a ``flush()`` every third, printing ``flushed N`` after each flush returns.
It runs until it is killed.
"""

from __future__ import annotations

import json
import sys

from _s3_helpers import SCHEMA, big_episode

import episodata_core._batching
from episodata_core.dataset import Dataset

mode, url, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
# small batches: a bulk write commits every few episodes, so a kill lands between or
# inside commits (the default batch of 64 MiB would make this one commit)
episodata_core._batching.BATCH_BYTES = 64 << 10

if mode == "bulk":

    def items():  # type: ignore[no-untyped-def]
        for number in range(100_000):
            print(f"yielded {number}", flush=True)
            yield big_episode(number)

    Dataset.from_episodes(items(), SCHEMA, url, storage_options=options)
else:
    dataset = Dataset.create(SCHEMA, url, storage_options=options)
    for number in range(100_000):
        dataset.add_episode(big_episode(number))
        if number % 3 == 2:
            dataset.flush()
            print(f"flushed {number + 1}", flush=True)
