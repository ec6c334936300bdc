"""Episodes larger than the read budget are read in blocks that fit it (formats.md §8.2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lerobot_fixtures import DATA, LENGTHS, copy_dataset, expected_episode, rewrite_data

from episodata_core.dataset import Dataset
from episodata_core.errors import FormatError
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.transfer import export_datasets, import_dataset

if TYPE_CHECKING:
    from pathlib import Path

FRAME_BYTES = 32 * 32 * 3 + 3 * 4 + 4 + 4  # image, state, action, reward of a fixture frame


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of every block the streamed reads decode."""
    import episodata_lerobot._stream as stream

    seen: list[int] = []
    original = stream.decode_columns

    def spy(found, table, first, where):  # type: ignore[no-untyped-def]
        seen.append(table.num_rows)
        return original(found, table, first, where)

    monkeypatch.setattr(stream, "decode_columns", spy)
    return seen


@pytest.mark.parametrize("name", ["pendulum-images", "pendulum-video"])
@pytest.mark.parametrize("final_observation", ["drop", "missing"])
@pytest.mark.parametrize("frames", [1, 2, 3, 5])
def test_episodes_larger_than_the_budget_are_read_in_blocks_exactly(
    name: str, final_observation: str, frames: int, blocks: list[int]
) -> None:
    dataset, report = import_dataset("lerobot", DATA / name, read_budget_bytes=frames * FRAME_BYTES,
                                     final_observation=final_observation)  # fmt: skip
    # every episode is longer than the budget: read `frames` frames at a time, never more
    streamed = [n for n in LENGTHS if n > frames]
    assert sum(blocks) == sum(streamed)
    assert max(blocks) <= frames
    assert len(blocks) >= sum(-(-n // frames) for n in streamed)
    assert report.episodes_imported == 3
    for e in range(3):
        expected = expected_episode(name, e, final_observation)
        episode = dataset.episode(e)
        read = episode.read()
        for key, values in expected.observations.items():
            np.testing.assert_array_equal(read.all_obs[key], values, err_msg=key)
        np.testing.assert_array_equal(read.action, expected.actions["action"])
        np.testing.assert_array_equal(read.reward, expected.rewards["reward"])
        assert (episode.terminated, episode.truncated) == (expected.terminated, expected.truncated)
        if final_observation == "missing":
            valid = np.asarray(read.buffers["info/observation_valid"])  # rows 0..T
            np.testing.assert_array_equal(valid, expected.infos["observation_valid"])


@pytest.mark.parametrize("frames", [1, 2, 4])
def test_an_early_done_in_a_streamed_episode_is_refused(frames: int, tmp_path: Path) -> None:
    folder = copy_dataset("pendulum-images", tmp_path)

    def early_done(table: pa.Table) -> pa.Table:
        done = table.column("next.done").to_numpy().copy()
        done[[2, 8]] = True  # episode 0 frame 2, episode 1 frame 2
        index = table.schema.get_field_index("next.done")
        return table.set_column(index, "next.done", pa.array(done))

    rewrite_data(folder, early_done)
    message = re.escape("episode 0: next.done is True at frame(s) [2] before its last frame")
    with pytest.raises(FormatError, match=message):
        import_dataset("lerobot", folder, tmp_path / "out", read_budget_bytes=frames * FRAME_BYTES)
    assert not (tmp_path / "out").exists()  # nothing left behind


def test_several_tasks_are_kept_frame_by_frame_across_blocks(tmp_path: Path) -> None:
    folder = copy_dataset("pendulum-images", tmp_path)
    pq.write_table(pa.table({"task_index": pa.array([0, 1], pa.int64()),
                             "task": ["swing up", "hold"]}), folder / "meta/tasks.parquet")  # fmt: skip

    def second_task(table: pa.Table) -> pa.Table:
        task = table.column("task_index").to_numpy().copy()
        task[3:6] = 1  # the second half of episode 0
        return table.set_column(table.schema.get_field_index("task_index"), "task_index",
                                pa.array(task))  # fmt: skip

    rewrite_data(folder, second_task)
    episodes = folder / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(episodes)
    listed = pa.array([["swing up", "hold"], ["swing up"], ["swing up"]])
    pq.write_table(table.set_column(table.schema.get_field_index("tasks"), "tasks", listed),
                   episodes)  # fmt: skip
    for final_observation, expected in (("drop", [0, 0, 0, 1, 1, 1]),
                                        ("missing", [0, 0, 0, 1, 1, 1, 0])):  # fmt: skip
        dataset, _ = import_dataset("lerobot", folder, read_budget_bytes=2 * FRAME_BYTES,
                                    final_observation=final_observation)  # fmt: skip
        tasks = np.asarray(dataset.episode(0).read().buffers["info/task_index"])
        np.testing.assert_array_equal(tasks, expected)


MEASURE = textwrap.dedent(
    """
    import json, resource, sys
    import episodata
    import episodata_lerobot._import  # noqa: F401
    import av, PIL.Image, pyarrow.parquet  # noqa: F401  (loaded before the baseline)
    from episodata_core import registry
    from episodata_memory import MemoryBackend

    class SinkBackend(MemoryBackend):
        # keeps the episode index, drops the rows: RSS then shows the importer's own memory
        name = "sink"

        def _append_shared(self, rows):
            return 0

        def append_rows(self, episode, rows):
            # an ongoing episode's steps are counted, not kept
            self._index_changed()
            self._length.data[episode] += len(next(iter(rows.values())))

    def peak_rss():
        # VmHWM belongs to this process image (ru_maxrss would start at the parent's peak)
        try:
            with open("/proc/self/status") as status:
                line = next(l for l in status if l.startswith("VmHWM:"))
            return int(line.split()[1]) * 1024
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    registry.register_backend(SinkBackend)
    path, budget, warm_up = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # a tiny import first: the modules an import loads are not what the budget bounds
    episodata.import_dataset("lerobot", warm_up, backend="sink", read_budget_bytes=budget)
    before = peak_rss()
    dataset, report = episodata.import_dataset(
        "lerobot", path, backend="sink", read_budget_bytes=budget
    )
    print(json.dumps({"growth": peak_rss() - before, "steps": report.transitions}))
    """
)


def _long_episode(path: Path, frames: int, size: int) -> int:
    """A LeRobot folder of one ``frames``-long episode of ``size``² PNG frames."""
    dataset = Dataset.create(DatasetSchema([
        FieldSpec("cam", shape=(size, size, 3), dtype="uint8", layout="HWC"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
    ]))  # fmt: skip
    # smooth frames (cheap to encode) that differ from each other
    ramp = np.arange(size, dtype=np.uint8)[None, :, None, None]
    cam = np.broadcast_to(ramp, (frames + 1, size, size, 3)).copy()
    cam += np.arange(frames + 1, dtype=np.uint8)[:, None, None, None]
    dataset.add_episode({
        "initial_observation": {"cam": cam[0]}, "observations": {"cam": cam[1:]},
        "actions": np.zeros((frames, 2), np.float32), "terminated": True,
    })  # fmt: skip
    export_datasets("lerobot", dataset, path, fps=30, task="look")
    return frames * size * size * 3


def _measure(path: Path, budget: int) -> dict[str, int]:
    result = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(budget),
                             str(DATA / "pendulum-images")],
                            capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    out: dict[str, int] = json.loads(result.stdout.splitlines()[-1])
    return out


def test_peak_memory_of_one_long_episode_is_bounded_by_the_read_budget(tmp_path: Path) -> None:
    path = tmp_path / "long"
    content = _long_episode(path, frames=1500, size=96)  # 41 MB of pixels in one episode
    budget = 2 << 20
    small = _measure(path, budget)
    whole = _measure(path, 1 << 31)
    assert small["steps"] == whole["steps"] == 1499
    # a few blocks, the parquet reader's and the allocators' buffers (12-16 MiB measured),
    # never the episode
    assert small["growth"] < 8 * budget + (8 << 20), small
    assert whole["growth"] > content, whole  # the control: one window holds everything
