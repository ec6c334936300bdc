"""DataLoader workers read a dataset on S3 through handles of their own."""

from __future__ import annotations

import numpy as np
import pytest
from _s3_helpers import SCHEMA, episode

from episodata_core.dataset import Dataset

SLOW_ON_MOTO = True  # workers and their helper processes cost seconds: SeaweedFS by default


# fork (Linux's default) reads through the zarr backend's helper processes; spawn pickles
# the dataset, whose URL carries its storage options: slower, so under -m slow
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_dataloader_workers_read_every_window_like_the_local_copy(bucket, tmp_path, context):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    items = [episode(i, 12 + i) for i in range(5)]
    local = Dataset.from_episodes(items, SCHEMA, str(tmp_path / "local"))
    local.copy_to(bucket.url(), storage_options=bucket.options).close()
    remote = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    segments, reference = remote.segments(6), local.segments(6)
    loader = DataLoader(
        segments,  # type: ignore[arg-type]
        batch_size=7,
        shuffle=False,
        num_workers=2,
        collate_fn=segments.collate,
        multiprocessing_context=context,
    )
    got = list(loader)
    want = [
        reference.collate(reference.__getitems__(list(range(i, min(i + 7, len(reference))))))
        for i in range(0, len(reference), 7)
    ]
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        for key, values in b.buffers.items():
            np.testing.assert_array_equal(np.asarray(a.buffers[key]), np.asarray(values))
    del torch
    remote.close()
    local.close()
