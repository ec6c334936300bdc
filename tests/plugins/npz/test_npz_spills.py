"""Flushed ongoing episodes are recorded facts: recovered to their last flush or reported lost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError
from episodata_core.testing import example_rows, example_schema
from episodata_npz import NpzDirectoryBackend, NpzDirectoryOptions

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

KEYS = ("observation/state", "observation/camera", "action/camera", "info/step_idx")


def _spill(folder: Path, episode: int) -> Path:
    return folder / "ongoing" / f"episode_{episode:09d}.npz"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _open(folder: Path, *, writable: bool) -> NpzDirectoryBackend:
    return NpzDirectoryBackend.open(str(folder), NpzDirectoryOptions(), writable=writable)


def _assert_rows(backend: NpzDirectoryBackend, episode: int, expected: dict[str, Any]) -> None:
    rows = len(expected["info/step_idx"])
    assert int(backend.episode_table().length[episode]) + 1 == rows
    stored = backend.read_rows(episode, 0, rows, list(KEYS))
    for key in KEYS:
        np.testing.assert_array_equal(stored[key], expected[key], err_msg=key)


def _with_flushed_episode(tmp_path: Path, flushes: list[int]) -> tuple[Path, dict[str, Any]]:
    """Three finalized episodes and episode 3 ongoing, flushed at each row count in ``flushes``."""
    folder = tmp_path / "ds"
    dataset = Dataset.create(example_schema(), folder, backend="npz_directory")
    backend = dataset.backend
    for i in range(3):
        backend.add_episode(
            example_rows(backend.schema, 4 + i, seed=i), terminated=True, truncated=False
        )
    rows = example_rows(backend.schema, flushes[-1], seed=33)
    episode = backend.start_episode({k: v[:1] for k, v in rows.items()})
    done = 1
    for count in flushes:
        backend.append_rows(episode, {k: v[done:count] for k, v in rows.items()})
        done = count
        backend.flush()  # type: ignore[attr-defined]
    dataset.close()
    return folder, rows


# -- a spill that is gone or not the one recorded -----------------------------------------------


@pytest.mark.parametrize("damage", ["deleted", "older copy", "torn"])
def test_lost_spill_of_the_newest_episode_is_reported_and_its_id_kept(
    tmp_path: Path, damage: str
) -> None:
    folder, _ = _with_flushed_episode(tmp_path, [3])
    older = _spill(folder, 3).read_bytes()
    writer = _open(folder, writable=True)
    writer.append_rows(3, example_rows(writer.schema, 6, seed=34))
    writer.close()  # flushes: 9 rows
    spill = _spill(folder, 3)
    if damage == "deleted":
        spill.unlink()
    elif damage == "older copy":
        spill.write_bytes(older)  # a valid archive of episode 3, but not its last flush
    else:
        spill.write_bytes(spill.read_bytes()[:-100])

    before = _snapshot(folder)
    dataset = Dataset.open(folder, read_only=True)
    assert _snapshot(folder) == before, "a read-only open changed a file"
    assert dataset.num_episodes == 4, "the flushed episode vanished and its id is free again"
    assert bool(dataset.backend.episode_table().ongoing[3])
    with pytest.raises(DatasetStateError, match=r"ongoing/episode_000000003\.npz .*lost"):
        dataset.episode(3).read()
    dataset.refresh()  # looks again, and finds the same
    assert dataset.num_episodes == 4
    with pytest.raises(DatasetStateError, match=r"ongoing/episode_000000003\.npz .*lost"):
        dataset.episode(3).read()
    problems = dataset.backend.verify()  # type: ignore[attr-defined]
    assert len(problems) == 1, problems
    assert problems[0].startswith("ongoing/episode_000000003.npz ")
    assert ("is missing" if damage == "deleted" else "SHA-256") in problems[0]
    dataset.close()

    writer = _open(folder, writable=True)
    assert len(writer.episode_table()) == 4
    with pytest.raises(DatasetStateError, match=r"episode_000000003\.npz .*cannot be resumed"):
        writer.append_rows(3, example_rows(writer.schema, 1, seed=35))
    new = example_rows(writer.schema, 5, seed=36)
    assert writer.start_episode(new) == 4, "a new episode took the lost episode's id"
    writer.finalize_episode(4, terminated=True, truncated=False)
    writer.close()
    reader = _open(folder, writable=False)
    _assert_rows(reader, 4, new)
    for i in range(3):
        _assert_rows(reader, i, example_rows(reader.schema, 4 + i, seed=i))
    reader.close()


def test_each_flush_is_logged_with_the_checksum_of_its_spill(tmp_path: Path) -> None:
    import hashlib

    folder, _ = _with_flushed_episode(tmp_path, [2, 5])
    lines = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    spills = [line for line in lines if "spill" in line]
    assert [s["length"] for s in spills] == [1, 4]
    assert all(s["spill"] == "ongoing/episode_000000003.npz" for s in spills)
    data = _spill(folder, 3).read_bytes()
    assert spills[-1]["sha256"] == hashlib.sha256(data).hexdigest()
    assert spills[-1]["size"] == len(data)


def test_spill_from_before_records_is_read_then_recorded(tmp_path: Path) -> None:
    folder, rows = _with_flushed_episode(tmp_path, [4])
    log = folder / "episodes.jsonl"
    # the layout of earlier versions: no "spill" lines
    log.write_text(
        "".join(line + "\n" for line in log.read_text().splitlines() if '"spill"' not in line)
    )
    reader = _open(folder, writable=False)
    _assert_rows(reader, 3, {k: v[:4] for k, v in rows.items()})
    assert any("no checksum recorded" in p for p in reader.verify())
    reader.close()
    writer = _open(folder, writable=True)
    assert writer.verify() == []
    writer.close()
    assert sum('"spill"' in line for line in log.read_text().splitlines()) == 1


# -- writers in other processes, killed with SIGKILL ---------------------------------------------

# Starting Python with NumPy and episodata costs seconds on a loaded machine, so one process
# imports them once and forks a fresh writer process per round: each writer opens the
# dataset itself and dies by a real SIGKILL, from itself or from the test.
_FORKER = """
import os, runpy, sys, traceback
import numpy, episodata_core.testing, episodata_npz  # noqa: F401  (imported once, shared)

for line in sys.stdin:
    script, *args = line.split("\\t")
    args[-1] = args[-1].rstrip("\\n")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            print("pid", os.getpid(), flush=True)
            sys.argv = [script, *args]
            runpy.run_path(script, run_name="__main__")
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    # on a line of its own even when the child was killed between a print and its newline
    print("\\nexit", code, flush=True)
"""


class Forker:
    """A process that runs scripts in forked children and reports how each ended."""

    def __init__(self, tmp_path: Path) -> None:
        self._tmp = tmp_path
        self._process = subprocess.Popen(
            [sys.executable, "-c", _FORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def start(self, source: str, *args: str) -> int:
        """Fork a child running ``source`` with ``sys.argv[1:] == args``; its pid."""
        script = self._tmp / f"script_{abs(hash(source))}.py"
        script.write_text(source)
        assert self._process.stdin is not None
        self._process.stdin.write("\t".join([str(script), *args]) + "\n")
        self._process.stdin.flush()
        kind, pid = self.line(skip_empty=True).split()
        assert kind == "pid"
        return int(pid)

    def line(self, *, skip_empty: bool = False) -> str:
        """The next line of output, stripped."""
        assert self._process.stdout is not None
        while True:
            line = self._process.stdout.readline()
            assert line, "the forking process died"
            if line.strip() or not skip_empty:
                return line.strip()

    def until_exit(self) -> tuple[list[str], int]:
        """The child's remaining non-empty output lines and its exit status (-9: SIGKILL)."""
        lines = []
        while not (line := self.line()).startswith("exit "):
            if line:
                lines.append(line)
        return lines, int(line.split()[1])

    def close(self) -> None:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.close()
        self._process.wait(timeout=60)
        self._process.stdout.close()


@pytest.fixture(scope="module")
def forker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forker]:
    forker = Forker(tmp_path_factory.mktemp("forker"))
    yield forker
    forker.close()


_KILLED_FLUSH = """
import os, signal, sys
from episodata_core.testing import example_rows
from episodata_npz import NpzDirectoryBackend, NpzDirectoryOptions
from episodata_npz._layout import CommitLog

folder, kill_at, when = sys.argv[1], int(sys.argv[2]), sys.argv[3]
original = CommitLog.append_spill
calls = 0

def append_spill(self, episode, entry):
    global calls
    calls += 1
    if calls == kill_at and when == "before the log line":
        os.kill(os.getpid(), signal.SIGKILL)  # the spill is written and fsynced
    original(self, episode, entry)
    if calls == kill_at and when == "before the rename":
        os.kill(os.getpid(), signal.SIGKILL)

CommitLog.append_spill = append_spill
backend = NpzDirectoryBackend.open(folder, NpzDirectoryOptions(), writable=True)
rows = example_rows(backend.schema, 9, seed=77)
episode = backend.start_episode({k: v[:1] for k, v in rows.items()})
for t in range(1, 9):
    backend.append_rows(episode, {k: v[t : t + 1] for k, v in rows.items()})
    backend.flush()
    print("flushed", episode, t + 1, flush=True)
"""


@pytest.mark.parametrize(
    ("kill_at", "when", "recovered"),
    [
        (1, "before the log line", 0),
        (3, "before the log line", 3),
        (1, "before the rename", 2),
        (3, "before the rename", 4),
    ],
)
def test_writer_killed_inside_a_flush(
    tmp_path: Path, forker: Forker, kill_at: int, when: str, recovered: int
) -> None:
    folder = tmp_path / "ds"
    Dataset.create(example_schema(), folder, backend="npz_directory").close()
    forker.start(_KILLED_FLUSH, str(folder), str(kill_at), when)
    lines, status = forker.until_exit()
    assert status == -signal.SIGKILL, lines
    flushed = [int(line.split()[2]) for line in lines]
    assert flushed == list(range(2, kill_at + 1))  # flushes that returned
    expected = {k: v[:recovered] for k, v in example_rows(example_schema(), 9, seed=77).items()}

    before = _snapshot(folder)
    reader = _open(folder, writable=False)
    assert _snapshot(folder) == before, "a read-only open changed a file"
    assert len(reader.episode_table()) == (1 if recovered else 0)
    if recovered:
        _assert_rows(reader, 0, expected)
        assert bool(reader.episode_table().ongoing[0])
    interrupted = [p for p in reader.verify() if ".tmp" in p]
    assert len(interrupted) == (when == "before the rename"), reader.verify()
    reader.close()

    writer = _open(folder, writable=True)
    assert writer.verify() == []
    assert not [p.name for p in (folder / "ongoing").iterdir() if p.name.endswith(".tmp")]
    if recovered:
        _assert_rows(writer, 0, expected)
        rest = example_rows(writer.schema, 9, seed=77)
        writer.append_rows(0, {k: v[recovered:] for k, v in rest.items()})
        writer.finalize_episode(0, terminated=True, truncated=False)
        _assert_rows(writer, 0, rest)
    writer.close()
    reader = _open(folder, writable=False)
    assert reader.verify() == []
    reader.close()
