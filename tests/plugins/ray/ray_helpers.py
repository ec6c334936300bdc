"""Episode-for-episode comparison of two datasets, read through their backends."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


def metadata_without_executor(dataset: Any) -> dict[str, Any]:
    """The metadata, less what names the executor and the destination (they differ by design)."""
    metadata = copy.deepcopy(dataset.manifest.metadata)
    pipeline = metadata.get("pipeline")
    if pipeline is not None:
        pipeline.pop("executor", None)
        pipeline.get("plugins", {}).pop("episodata-ray", None)
        # the two runs write to two paths; the path is in the config and so its hash
        pipeline["config"]["store"]["path"] = None
        pipeline.pop("config_sha256")
    return metadata


def assert_same_episodes(actual: Any, expected: Any) -> None:
    """Ids, lengths, flags, field presence, every stored value and dtype, and metadata."""
    assert actual.schema == expected.schema
    have, want = actual.backend.episode_table(), expected.backend.episode_table()
    assert len(have) == len(want) == actual.num_episodes == expected.num_episodes
    for name in ("length", "terminated", "truncated", "ongoing"):
        np.testing.assert_array_equal(getattr(have, name), getattr(want, name), err_msg=name)
    assert have.present.keys() == want.present.keys()
    for key in have.present:
        np.testing.assert_array_equal(have.present[key], want.present[key], err_msg=key)
    keys = expected.schema.qualified_keys
    for index in range(len(want)):
        fields = [k for k in keys if k not in want.present or want.present[k][index]]
        stop = int(want.length[index]) + 1
        a = actual.backend.read_rows(index, 0, stop, fields)
        b = expected.backend.read_rows(index, 0, stop, fields)
        assert a.keys() == b.keys()
        for key in b:
            assert a[key].dtype == b[key].dtype, (index, key)
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"episode {index} {key}")
    assert metadata_without_executor(actual) == metadata_without_executor(expected)
