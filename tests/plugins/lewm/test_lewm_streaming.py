"""Streaming (formats.md §2.9): reads stay within read_budget_bytes, memory stays bounded."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import h5py
import hdf5plugin
import numpy as np
import pytest
from tests.fixtures.hdf5_sources import check_dataset, swm_preset, swm_tiny

import episodata
from episodata_lewm._windows import plan_windows

TINY_ROW_BYTES = 300  # pixels 192, state/action/reward/step_idx/success 8 each, ep_idx 4,
# and 64 for the vlen env_name string, as the importer counts it


@pytest.fixture
def spy_reads(monkeypatch):
    """Record ``(dataset name, rows, bytes)`` of every h5py read."""
    reads: list[tuple[str, int, int]] = []
    original = h5py.Dataset.__getitem__

    def spy(self, args, new_dtype=None):
        out = original(self, args, new_dtype=new_dtype)
        array = np.asarray(out)
        reads.append((self.name, array.shape[0] if array.ndim else 0, array.nbytes))
        return out

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    return reads


@pytest.mark.parametrize("env", ["tworoom", "cube"])
def test_no_read_exceeds_the_budget_or_covers_a_whole_column(sources, spy_reads, env):
    path, oracle = swm_preset(sources, env)
    with h5py.File(path) as handle:
        rows = int(handle["ep_len"][()].sum())
        longest = int(handle["ep_len"][()].max())
    spy_reads.clear()
    budget = 2 * longest * (64 * 64 * 3 + 200)  # about two episodes of pixels and the rest
    dataset, report = episodata.import_dataset("lewm", path, read_budget_bytes=budget)
    check_dataset(dataset, report, oracle)
    whole = {name for name, count, _ in spy_reads if count == rows}
    assert whole <= {"/ep_len", "/ep_offset"}, whole  # only the episode table is read whole
    assert max(nbytes for *_, nbytes in spy_reads) <= budget
    assert sum(name == "/pixels" for name, *_ in spy_reads) >= 2


@pytest.mark.parametrize("form", ["plain", "blosc"])
@pytest.mark.parametrize("budget_rows", [1, 3, 5, 10, 1000])
def test_episodes_larger_than_the_budget_are_streamed_exactly(
    sources, spy_reads, form, budget_rows
):
    path, oracle = swm_tiny(sources, form=form)
    spy_reads.clear()
    budget = budget_rows * TINY_ROW_BYTES
    dataset, report = episodata.import_dataset("lewm", path, read_budget_bytes=budget)
    check_dataset(dataset, report, oracle)
    pixel_reads = [count for name, count, _ in spy_reads if name == "/pixels"]
    assert max(pixel_reads) <= max(budget_rows, 1)


def test_windows_group_adjacent_episodes_and_cut_large_ones_on_chunk_edges():
    offsets = np.array([0, 4, 10, 40], dtype=np.int64)
    lengths = np.array([4, 6, 30, 3], dtype=np.int64)
    windows = plan_windows(offsets, lengths, row_bytes=1, budget=12, chunk_rows=4)
    spans = [(w.start, w.stop, w.ordinals.tolist(), w.streamed) for w in windows]
    assert spans == [
        (0, 10, [0, 1], False),
        (10, 12, [2], True),  # 12 rows of budget, cut at multiples of 12 (3 chunks)
        (12, 24, [2], True),
        (24, 36, [2], True),
        (36, 40, [2], True),
        (40, 43, [3], False),
    ]
    assert [w.first for w in windows[1:5]] == [True, False, False, False]
    assert [w.last for w in windows[1:5]] == [False, False, False, True]
    # non-adjacent selections never share a window
    apart = plan_windows(offsets[[0, 2]], lengths[[0, 2]], row_bytes=1, budget=100, chunk_rows=1)
    assert [(w.start, w.stop) for w in apart] == [(0, 4), (10, 40)]


MEASURE = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy as np
    import episodata
    import episodata_lewm._impl  # noqa: F401  (h5py, hdf5plugin: loaded before the baseline)
    from episodata_core import registry
    from episodata_memory import MemoryBackend

    class SinkBackend(MemoryBackend):
        # keeps the episode index, drops the rows: RSS then shows the importer's own memory
        name = "sink"

        def _append_shared(self, rows):
            return 0

    def peak_rss():
        # VmHWM belongs to this process image; ru_maxrss would start at the parent's peak,
        # which a child inherits across fork and exec on Linux
        try:
            with open("/proc/self/status") as status:
                line = next(l for l in status if l.startswith("VmHWM:"))
            return int(line.split()[1]) * 1024
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    registry.register_backend(SinkBackend)
    path, budget = sys.argv[1], int(sys.argv[2])
    before = peak_rss()
    start = time.perf_counter()
    dataset, report = episodata.import_dataset(
        "lewm", path, backend="sink", read_budget_bytes=budget
    )
    seconds = time.perf_counter() - start
    peak = peak_rss()
    print(json.dumps({"growth": peak - before, "seconds": seconds, "steps": report.transitions}))
    """
)


def write_pixel_file(path, *, episodes, length, size=64):
    """An swm file of ``episodes * length`` rows of ``size``² RGB frames, Blosc-compressed."""
    rows = episodes * length
    blosc = hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)
    with h5py.File(path, "w", libver="latest") as handle:
        handle["ep_len"] = np.full(episodes, length, dtype=np.int32)
        handle["ep_offset"] = np.arange(episodes, dtype=np.int64) * length
        action = np.tile(np.arange(length, dtype=np.float32)[:, None], (episodes, 2))
        action[length - 1 :: length] = np.nan
        handle["action"] = action
        handle["step_idx"] = np.tile(np.arange(length, dtype=np.int64), episodes)
        pixels = handle.create_dataset(
            "pixels",
            shape=(rows, size, size, 3),
            dtype=np.uint8,
            chunks=(100, size, size, 3),
            **blosc,
        )
        for start in range(0, rows, 1000):
            stop = min(start + 1000, rows)
            frames = np.arange(start, stop, dtype=np.int64) % 256
            pixels[start:stop] = np.broadcast_to(
                frames[:, None, None, None].astype(np.uint8), (stop - start, size, size, 3)
            )
    return rows * size * size * 3


def _measure(path, budget):
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), str(budget)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_peak_memory_is_bounded_by_the_read_budget(tmp_path):
    path = tmp_path / "pixels.h5"
    content = write_pixel_file(path, episodes=128, length=128)  # 201 MB of pixels
    budget = 8 << 20
    small = _measure(path, budget)
    whole = _measure(path, 1 << 31)
    assert small["steps"] == whole["steps"] == 128 * 127
    # the HDF5 chunk cache (64 MiB, formats.md §2.9) plus a few read windows, never the file
    assert small["growth"] < (64 << 20) + 4 * budget, small
    assert whole["growth"] > content, whole  # the control: one window holds everything
