"""The power-cut layer itself (``episodata_core.testing.powercut``), before it judges backends.

Each test runs a tiny writer program under the shim, cuts it, and compares the durable
image with what the model says a disk keeps: what the writer synced, nothing else. The
expected contents are the bytes the writer was told to write; SQLite's own recovery is
the oracle of the SQLite cases (its WAL keeps whole commits or none).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from episodata_core.testing.powercut import run_and_cut

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_core.testing.powercut import PowerCut

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD is Linux only")

# every writer prints "done" when it has written everything, then waits to be cut
PRELUDE = """
import os, sys, time
root = sys.argv[1]
def path(name): return os.path.join(root, name)
def sync_folder(folder=root):
    fd = os.open(folder, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
def write(name, data, sync=False, mode="wb"):
    with open(path(name), mode) as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
"""
DONE = "\nprint('done', flush=True)\ntime.sleep(60)\n"


def _cut(tmp_path: Path, body: str, root: Path | None = None) -> PowerCut:
    """Run ``body`` as a writer on ``tmp_path/root``; cut it at ``done``."""
    root = root or tmp_path / "root"
    root.mkdir(exist_ok=True)
    program = PRELUDE + textwrap.dedent(body) + DONE
    result = run_and_cut(
        [sys.executable, "-c", program, str(root)],
        root,
        tmp_path / "image",
        cut=lambda line: 0.0 if line == "done" else None,
        timeout=60,
    )
    assert result.lines[-1:] == ["done"], result.stderr
    assert result.returncode is None  # killed by the cut, not ended
    return result


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder``: a file's bytes, None for a folder."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def test_synced_file_survives_and_unsynced_append_is_dropped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "log").write_bytes(b"old\n")
    (root / "untouched").write_bytes(b"same\n")
    result = _cut(
        tmp_path,
        """
        write("log", b"one\\n", sync=True, mode="ab")
        write("log", b"two\\n", mode="ab")
        """,
    )
    assert (root / "log").read_bytes() == b"old\none\ntwo\n"  # the writes did happen
    assert _tree(result.image) == {"log": b"old\none\n", "untouched": b"same\n"}
    assert [(r.kind, os.path.basename(r.path)) for r in result.records] == [("file", "log")]


def test_file_never_synced_is_empty(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "before").write_bytes(b"as it was")
    result = _cut(
        tmp_path,
        """
        write("new", b"never synced")
        write("before", b"rewritten, never synced")
        sync_folder()
        """,
    )
    # the folder's fsync made the name durable, not the bytes
    assert _tree(result.image) == {"before": b"as it was", "new": b""}


def test_new_file_without_folder_fsync_is_gone(tmp_path: Path) -> None:
    result = _cut(tmp_path, 'write("new", b"synced, but its name is not", sync=True)\n')
    assert _tree(result.image) == {}


def test_rename_without_folder_fsync_is_undone(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "x").write_bytes(b"old")
    result = _cut(
        tmp_path,
        """
        write("tmp", b"new", sync=True)
        os.replace(path("tmp"), path("x"))
        """,
    )
    assert (root / "x").read_bytes() == b"new"
    assert _tree(result.image) == {"x": b"old"}


def test_rename_with_folder_fsync_survives(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "x").write_bytes(b"old")
    (root / "gone").write_bytes(b"unlinked")
    result = _cut(
        tmp_path,
        """
        write("tmp", b"new", sync=True)
        os.replace(path("tmp"), path("x"))
        os.unlink(path("gone"))
        sync_folder()
        """,
    )
    assert _tree(result.image) == {"x": b"new"}


def test_new_folder_needs_its_own_fsync_and_its_parents(tmp_path: Path) -> None:
    result = _cut(
        tmp_path,
        """
        os.mkdir(path("kept"))
        os.mkdir(path("empty"))
        write("kept/a", b"a", sync=True)
        write("empty/b", b"b", sync=True)
        sync_folder(path("kept"))
        sync_folder()
        """,
    )
    # "empty" was itself never synced: its entry "b" is not durable
    assert _tree(result.image) == {"empty": None, "kept": None, "kept/a": b"a"}


def test_syncs_from_many_threads(tmp_path: Path) -> None:
    # TensorStore syncs from a thread pool: records must not interleave or get lost
    result = _cut(
        tmp_path,
        """
        import threading
        def worker(t):
            os.mkdir(path(f"t{t}"))
            for i in range(40):
                write(f"t{t}/{i}", f"{t}:{i}".encode() * (i + 1), sync=True)
                if i % 10 == 9:
                    sync_folder(path(f"t{t}"))
                write(f"t{t}/{i}", b"unsynced tail", mode="ab")
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        sync_folder()
        """,
    )
    expected: dict[str, bytes | None] = {}
    for t in range(8):
        expected[f"t{t}"] = None
        for i in range(40):
            expected[f"t{t}/{i}"] = f"{t}:{i}".encode() * (i + 1)
    assert _tree(result.image) == expected
    assert len(result.records) == 8 * 40 + 8 * 4 + 1


# SQLite in WAL mode. Each commit inserts one row and prints "commit I N": N records exist
# once it returned. SQLite keeps a commit durable once a sync of the WAL (or a checkpoint)
# followed it, so the oracle is the shim's own record order, not SQLite.
SQLITE_WRITER = """
import glob, sqlite3
shadow = os.environ["POWERCUT_SHADOW"]
db = sqlite3.connect(path("log.db"), isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous={synchronous}")
db.execute("PRAGMA wal_autocheckpoint=40")  # pages: a checkpoint every ~10 commits
for i in range({commits}):
    db.execute("INSERT INTO t VALUES (?, ?)", (i, bytes([i % 256]) * 12000))
    print("commit", i, len(glob.glob(shadow + "/*.rec")), flush=True)
"""


def _sqlite_cut(tmp_path: Path, synchronous: str, commits: int, cut_at: str) -> PowerCut:
    root = tmp_path / "root"
    root.mkdir()
    with sqlite3.connect(root / "log.db") as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (i INTEGER PRIMARY KEY, payload BLOB)")
    db.close()
    program = PRELUDE + SQLITE_WRITER.format(synchronous=synchronous, commits=commits) + DONE
    return run_and_cut(
        [sys.executable, "-c", program, str(root)],
        root,
        tmp_path / "image",
        cut=lambda line: 0.0 if line.startswith(cut_at) else None,
        timeout=60,
    )


def _read_back(image: Path) -> list[int]:
    db = sqlite3.connect(image / "log.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = db.execute("SELECT i, payload FROM t ORDER BY i").fetchall()
    finally:
        db.close()
    for i, payload in rows:
        assert payload == bytes([i % 256]) * 12000, f"row {i} is torn"
    return [i for i, _ in rows]


def test_sqlite_wal_normal_loses_only_commits_after_the_last_wal_sync(tmp_path: Path) -> None:
    result = _sqlite_cut(tmp_path, "NORMAL", 60, "done")
    assert result.returncode is None, result.stderr
    after = {int(w[1]): int(w[2]) for w in map(str.split, result.lines) if w[0] == "commit"}
    assert sorted(after) == list(range(60))
    log_syncs = [r.seq for r in result.records if r.path.endswith(("log.db", "log.db-wal"))]
    assert log_syncs, "no checkpoint in 60 commits: the test proves nothing"
    kept = _read_back(result.image)
    assert kept == list(range(len(kept)))  # a prefix: commits are ordered
    last_sync = max(log_syncs)
    # a commit followed by a sync of the log survives; one begun after the last sync cannot
    must = [i for i in after if after[i] < last_sync]
    cannot = [i for i in after if after.get(i - 1, 0) >= last_sync]
    assert set(must) <= set(kept)
    assert not set(cannot) & set(kept)
    assert cannot, "every commit was synced: the test shows no loss"


@pytest.mark.parametrize("cut_at", ["commit 25 ", "done"])
def test_sqlite_wal_full_loses_no_commit(tmp_path: Path, cut_at: str) -> None:
    result = _sqlite_cut(tmp_path, "FULL", 40, cut_at)
    assert result.returncode is None, result.stderr
    returned = [int(w[1]) for w in map(str.split, result.lines) if w[0] == "commit"]
    kept = _read_back(result.image)
    assert kept == list(range(len(kept)))
    # every commit that returned is there; at most the one in flight at the cut besides
    assert returned == list(range(len(returned)))
    assert len(returned) <= len(kept) <= len(returned) + 1


def test_journaled_namespace_keeps_names_made_before_any_sync(tmp_path: Path) -> None:
    # ext4/XFS order: a sync of anything commits the renames and new names made before it
    root = tmp_path / "root"
    root.mkdir()
    (root / "x").write_bytes(b"old")
    program = (
        PRELUDE
        + textwrap.dedent(
            """
        os.mkdir(path("sub"))
        write("sub/never", b"named, never synced")
        write("tmp", b"new", sync=True)
        os.replace(path("tmp"), path("x"))
        write("other", b"synced last", sync=True)
        os.mkdir(path("after"))
        """
        )
        + DONE
    )
    result = run_and_cut(
        [sys.executable, "-c", program, str(root)],
        root,
        tmp_path / "image",
        cut=lambda line: 0.0 if line == "done" else None,
        namespace="journaled",
        timeout=60,
    )
    assert result.returncode is None, result.stderr
    # "after" came after the last sync; "sub/never" is named but its bytes never synced
    assert _tree(result.image) == {
        "other": b"synced last",
        "sub": None,
        "sub/never": b"",
        "x": b"new",
    }


def test_fdatasync_and_msync_are_sync_points(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for name in ("data", "mapped"):
        (root / name).write_bytes(b"0000")
    result = _cut(
        tmp_path,
        """
        import mmap
        with open(path("data"), "r+b") as f:
            f.write(b"1111"); f.flush(); os.fdatasync(f.fileno())
            f.seek(0); f.write(b"2222"); f.flush()
        with open(path("mapped"), "r+b") as f:
            m = mmap.mmap(f.fileno(), 4)
            m[:] = b"1111"; m.flush()  # msync(MS_SYNC)
            m[:] = b"2222"
            m.close()
        """,
    )
    assert _tree(result.image) == {"data": b"1111", "mapped": b"1111"}


@pytest.mark.parametrize(
    "call",
    [
        "fd = os.open(root, os.O_RDONLY); assert ctypes.CDLL(None).syncfs(fd) == 0",
        "os.sync()",
    ],
)
def test_syncfs_and_sync_cover_the_whole_tree(tmp_path: Path, call: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a").write_bytes(b"0000")
    result = _cut(
        tmp_path,
        f"""
        import ctypes
        os.mkdir(path("sub"))
        write("a", b"1111")
        write("sub/new", b"1111")
        {call}
        write("a", b"2222")
        write("later", b"1111")
        """,
    )
    assert _tree(result.image) == {"a": b"1111", "sub": None, "sub/new": b"1111"}


def test_expected_durable_set_follows_returned_flushes(tmp_path: Path) -> None:
    # the power-loss oracle: only what a returned flush covered must survive the cut
    from episodata_core.testing.power_loss import _Expected

    log = tmp_path / "log"
    log.write_text(
        "open 0\nadd 0 0\nfinal 0\nstart 1 0\nflush\nflushed 1:3\n"
        "batch 2 2 0\nfinal 2 3\nstep 1 5\nflush\n"  # the second flush never returned
    )
    expected = _Expected()
    assert expected.take(log) == {2, 3}  # finalized after the last returned flush
    assert expected.final == {0}
    assert expected.flushed == {1: 3}
    assert expected.whole == {0, 2, 3}
    with log.open("a") as out:
        out.write("open 4\nstart 2 1\nflushed 1:5 2:1\nfinal 1\n")
    assert expected.take(log) == {1}
    assert expected.final == {0}  # 2 and 3 were lost by the cut and are written anew
    assert expected.flushed == {1: 5, 2: 1}
    assert expected.whole == {0, 3}
    assert expected.variant == {0: 0, 1: 0, 2: 1, 3: 0}


def test_expected_durable_set_follows_the_sync_interval(tmp_path: Path) -> None:
    # with a sync interval, a finalize that old at the cut is durable without a flush
    from episodata_core.testing.power_loss import _Expected

    log = tmp_path / "log"
    log.write_text("open 0\nadd 0 0\nfinal 0\nadd 1 0\nfinal 1\nadd 2 0\n")
    expected = _Expected()
    # seconds before the cut, line by line; the last line has no age (the report only)
    assert expected.take(log, [3.0, 2.9, 2.0, 1.6, 1.4], older=1.5) == {1}
    assert expected.final == {0}


@pytest.mark.parametrize(
    ("logged", "found"),
    [
        (("episodata.zarr", "INFO", "recovered 3 episodes from the log"), True),
        (("episodata", "DEBUG", "recovered 3 episodes"), False),  # not INFO
        (("episodata", "INFO", "opened"), False),
        (("other", "INFO", "recovered"), False),  # not the episodata logger
    ],
)
def test_recovery_report_is_an_info_record_on_the_episodata_logger(
    logged: tuple[str, str, str], found: bool
) -> None:
    import logging

    from episodata_core.dataset import Dataset
    from episodata_core.testing import example_schema
    from episodata_core.testing.power_loss import _after_recovery, _captured

    dataset = Dataset.create(example_schema())
    name, level, message = logged
    with _captured("episodata") as records:
        logging.getLogger(name).log(getattr(logging, level), message)
    reported = _after_recovery(dataset, records, expect_recovery_report=True)
    assert (reported == []) is found
    if not found:
        assert "logged no INFO record containing 'recovered'" in reported[0]
    assert _after_recovery(dataset, records, expect_recovery_report=False) == []


def test_a_reused_inode_number_is_another_file(tmp_path: Path) -> None:
    # "old" is unlinked and its inode number handed to a new file, whose bytes are synced;
    # without a folder fsync the durable "old" is the old file, not the new one's bytes
    root = tmp_path / "root"
    root.mkdir()
    (root / "old").write_bytes(b"old bytes")
    inode = (root / "old").stat().st_ino
    result = _cut(
        tmp_path,
        f"""
        os.unlink(path("old"))
        for i in range(500):  # until the file system hands the number out again
            write(f"new{{i}}", b"new bytes", sync=True)
            if os.stat(path(f"new{{i}}")).st_ino == {inode}:
                print("reused", flush=True)
                break
        """,
    )
    if "reused" not in result.lines:
        pytest.skip("the file system did not reuse the inode number: nothing to show")
    assert _tree(result.image) == {"old": b"old bytes"}


def test_cut_after_the_program_exited_still_drops_unsynced_writes(tmp_path: Path) -> None:
    # the page cache outlives the process, not the power: an exit is no sync point; and
    # an unlinked file still syncs through an open descriptor, under its durable name
    root = tmp_path / "root"
    root.mkdir()
    (root / "log").write_bytes(b"old\n")
    (root / "gone").write_bytes(b"old\n")
    program = PRELUDE + textwrap.dedent(
        """
        write("log", b"synced\\n", sync=True, mode="ab")
        write("log", b"written, then exit\\n", mode="ab")
        write("gone", b"synced after its unlink\\n", mode="ab")
        fd = os.open(path("gone"), os.O_RDONLY)
        os.unlink(path("gone"))
        os.fsync(fd)
        """
    )
    result = run_and_cut([sys.executable, "-c", program, str(root)], root, tmp_path / "image")
    assert result.returncode == 0, result.stderr
    assert not (root / "gone").exists()
    assert _tree(result.image) == {
        "gone": b"old\nsynced after its unlink\n",
        "log": b"old\nsynced\n",
    }
