"""Recovery after a killed writer, integrity checks and untrusted files."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata_core import _shared_writer
from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.testing import example_rows, example_schema
from episodata_npz import NpzDirectoryBackend, NpzDirectoryOptions

if TYPE_CHECKING:
    from pathlib import Path


def _dataset(tmp_path: Path, episodes: int = 3) -> tuple[Path, list[dict[str, Any]]]:
    folder = tmp_path / "ds"
    dataset = Dataset.create(example_schema(), folder, backend="npz_directory")
    rows = [example_rows(dataset.schema, 5 + i, seed=i) for i in range(episodes)]
    for r in rows:
        dataset.backend.add_episode(r, terminated=True, truncated=False)
    dataset.close()
    return folder, rows


def _archive(folder: Path, episode: int, sub: str = "episodes") -> Path:
    return folder / sub / f"episode_{episode:09d}.npz"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _open(folder: Path, *, writable: bool) -> NpzDirectoryBackend:
    return NpzDirectoryBackend.open(str(folder), NpzDirectoryOptions(), writable=writable)


def _write_zip(path: Path, members: dict[str, np.ndarray[Any, Any]], **save: Any) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in members.items():
            buffer = io.BytesIO()
            np.save(buffer, array, **save)
            archive.writestr(name, buffer.getvalue())


def _members(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    with np.load(path, allow_pickle=False) as archive:
        return {f"{name}.npy": archive[name] for name in archive.files}


# -- a killed writer --------------------------------------------------------------------------


def test_leftovers_of_a_killed_writer(tmp_path: Path) -> None:
    folder, rows = _dataset(tmp_path)
    writer = Dataset.open(folder)
    ongoing = example_rows(writer.schema, 6, seed=40)
    writer._prepare_write()
    backend = writer.backend
    three = backend.start_episode(ongoing)
    writer.flush()
    spill = _archive(folder, three, "ongoing").read_bytes()
    backend.finalize_episode(three, terminated=False, truncated=True)
    writer.close()
    log = folder / "episodes.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    assert len(lines) == 5  # three archives, the spill of episode 3, its archive
    assert b'"spill":"ongoing/episode_000000003.npz"' in lines[3]
    # killed after renaming episode 3 into place: no log line, its spill still there;
    # killed mid-append of a line, and with a temporary archive on disk
    _archive(folder, three, "ongoing").write_bytes(spill)
    log.write_bytes(b"".join(lines[:4]) + b'{"file":"episodes/episode_0000')
    temporary = folder / "episodes" / ".episode_000000004.npz.4242.tmp"
    temporary.write_bytes(b"half an archive")

    before = _snapshot(folder)
    reader = _open(folder, writable=False)
    assert _snapshot(folder) == before, "a read-only open changed a file"
    table = reader.episode_table()
    assert table.ongoing.tolist() == [False] * 4
    assert table.truncated.tolist() == [False, False, False, True]
    np.testing.assert_array_equal(
        reader.read_rows(3, 0, 6, ["observation/state"])["observation/state"],
        ongoing["observation/state"],
    )
    assert any("no checksum recorded" in p for p in reader.verify())
    reader.close()

    recovered = _open(folder, writable=True)
    assert not temporary.exists()
    assert not _archive(folder, three, "ongoing").exists()
    assert log.read_bytes().startswith(b"".join(lines[:4]))
    assert log.read_bytes().endswith(b"\n")
    assert recovered.verify() == []
    for i, r in enumerate(rows):
        np.testing.assert_array_equal(
            recovered.read_rows(i, 0, 5 + i, ["info/step_idx"])["info/step_idx"], r["info/step_idx"]
        )
    recovered.close()


def test_recovered_ongoing_episode_resumes(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path, episodes=1)
    writer = Dataset.open(folder)
    rows = example_rows(writer.schema, 7, seed=8)
    writer._prepare_write()
    episode = writer.backend.start_episode({k: v[:4] for k, v in rows.items()})
    writer.flush()
    # the process dies here, without closing; the operating system drops its lock
    _shared_writer.abandon(folder)
    again = Dataset.open(folder)
    assert again.backend.episode_table().ongoing.tolist() == [False, True]
    resumed = again.resume_episode(episode)
    again.backend.append_rows(resumed.episode, {k: v[4:] for k, v in rows.items()})
    resumed.end(terminated=True)
    np.testing.assert_array_equal(
        again.backend.read_rows(1, 0, 7, ["observation/camera"])["observation/camera"],
        rows["observation/camera"],
    )
    again.close()


# -- verify -----------------------------------------------------------------------------------


def test_verify_names_missing_extra_and_changed_files(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path)
    _archive(folder, 1).unlink()
    (folder / "episodes" / "notes.txt").write_text("hello")
    # a valid archive, but not the one that was written
    members = _members(_archive(folder, 2))
    members["observation/state.npy"] = members["observation/state.npy"] + 1
    _write_zip(_archive(folder, 2), members)
    backend = _open(folder, writable=False)
    problems = backend.verify()
    backend.close()
    assert any("episodes/episode_000000001.npz" in p and "missing" in p for p in problems)
    assert any("episodes/notes.txt" in p and "unexpected" in p for p in problems)
    assert any("episodes/episode_000000002.npz" in p and "SHA-256" in p for p in problems)
    assert len(problems) == 3
    # the lost episode keeps its place in the index; reading it says what is wrong
    dataset = Dataset.open(folder, read_only=True)
    assert dataset.num_episodes == 3
    with pytest.raises(DatasetStateError, match=r"episode_000000001\.npz is missing"):
        dataset.episode(1).read()
    dataset.close()


def test_reading_a_truncated_archive_raises(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path)
    data = _archive(folder, 0).read_bytes()
    _archive(folder, 0).write_bytes(data[: len(data) // 2])
    dataset = Dataset.open(folder, read_only=True)
    with pytest.raises(DatasetStateError, match=r"episodes/episode_000000000\.npz.*damaged"):
        dataset.episode(0).read()
    assert any("episode_000000000" in p for p in dataset.backend.verify())  # type: ignore[attr-defined]
    dataset.close()


# -- untrusted files --------------------------------------------------------------------------


def test_log_entry_pointing_outside_the_folder_is_refused(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path)
    (tmp_path / "outside.npz").write_bytes(_archive(folder, 0).read_bytes())
    line = json.loads((folder / "episodes.jsonl").read_text().splitlines()[0])
    line["file"] = "../outside.npz"
    with (folder / "episodes.jsonl").open("a") as log:
        log.write(json.dumps(line) + "\n")
    before = _snapshot(folder)
    with pytest.raises(DatasetStateError, match=r"line 4: path '\.\./outside\.npz' points outside"):
        Dataset.open(folder, read_only=True)
    assert _snapshot(folder) == before


def test_symlink_leaving_the_folder_is_refused(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path)
    outside = tmp_path / "elsewhere.npz"
    shutil.copy(_archive(folder, 0), outside)
    _archive(folder, 3).symlink_to(outside)
    with pytest.raises(EpisodataError, match="points outside the dataset folder"):
        Dataset.open(folder, read_only=True)


@pytest.mark.parametrize("member", ["../../evil.npy", "/etc/evil.npy", "observation/../../x.npy"])
def test_archive_member_escaping_the_folder_is_refused(tmp_path: Path, member: str) -> None:
    folder, _ = _dataset(tmp_path)
    members = _members(_archive(folder, 0))
    members[member] = np.zeros(3)
    _write_zip(_archive(folder, 0), members)
    dataset = Dataset.open(folder, read_only=True)
    with pytest.raises(
        DatasetStateError, match=r"episode_000000000\.npz: archive member .* would escape"
    ):
        dataset.episode(0).read()
    dataset.close()


def test_object_member_is_never_unpickled(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path)
    members = _members(_archive(folder, 0))
    members["observation/state.npy"] = np.array([{"pickled": True}] * 5, dtype=object)
    _write_zip(_archive(folder, 0), members, allow_pickle=True)
    dataset = Dataset.open(folder, read_only=True)
    with pytest.raises(DatasetStateError, match=r"holds object .* expected float32"):
        dataset.backend.read_rows(0, 0, 5, ["observation/state"])
    dataset.close()


def test_header_asking_for_a_huge_array_is_refused_before_allocating(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path)
    members = _members(_archive(folder, 0))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 3)}
    )
    with zipfile.ZipFile(_archive(folder, 0), "w") as archive:
        for name, array in members.items():
            if name != "observation/state.npy":
                buffer = io.BytesIO()
                np.save(buffer, array)
                archive.writestr(name, buffer.getvalue())
        archive.writestr("observation/state.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:])
    dataset = Dataset.open(folder, read_only=True)
    with pytest.raises(DatasetStateError, match=r"\(1000000000000, 3\), expected float32 \(5, 3\)"):
        dataset.backend.read_rows(0, 0, 5, ["observation/state"])
    dataset.close()


# -- a reader next to a live writer -------------------------------------------------------------

_LIVE_WRITER = """
import sys
from episodata_core.testing import example_rows
from episodata_npz import NpzDirectoryBackend, NpzDirectoryOptions

backend = NpzDirectoryBackend.open(sys.argv[1], NpzDirectoryOptions(), writable=True)
print("ready", flush=True)
while True:
    first = len(backend.episode_table())
    a = example_rows(backend.schema, 3 + first % 5, seed=first)
    b = example_rows(backend.schema, 3 + (first + 1) % 5, seed=first + 1)
    # episode `first` is ongoing and unflushed when `first + 1` is committed
    backend.start_episode({k: v[:1] for k, v in a.items()})
    backend.add_episode(b, terminated=True, truncated=False)
    for t in range(1, len(a["reward/reward"])):
        backend.append_rows(first, {k: v[t : t + 1] for k, v in a.items()})
        backend.flush()
    backend.finalize_episode(first, terminated=False, truncated=True)
"""


def test_reader_sees_consistent_snapshots_while_a_writer_appends(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    Dataset.create(example_schema(), folder, backend="npz_directory").close()
    reader = Dataset.open(folder, read_only=True)
    checked: set[int] = set()
    with subprocess.Popen(
        [sys.executable, "-c", _LIVE_WRITER, str(folder)], stdout=subprocess.PIPE, text=True
    ) as writer:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        # two seconds on a quiet machine; on a loaded one, until there is enough to check
        start = time.monotonic()
        try:
            while time.monotonic() < start + 2.0 or (
                len(checked) < 10 and time.monotonic() < start + 30.0
            ):
                reader.refresh()
                table = reader.backend.episode_table()
                for episode in range(len(table)):
                    if episode in checked:
                        continue
                    expected = example_rows(reader.schema, 3 + episode % 5, seed=episode)
                    rows = int(table.length[episode]) + 1
                    stored = reader.backend.read_rows(episode, 0, rows, ["observation/state"])
                    np.testing.assert_array_equal(
                        stored["observation/state"], expected["observation/state"][:rows]
                    )
                    if not table.ongoing[episode]:
                        assert rows == len(expected["observation/state"])
                        checked.add(episode)
        finally:
            writer.kill()
            writer.wait()
    reader.close()
    assert len(checked) >= 10, "the writer made too little progress to test anything"


def test_damaged_spill_is_reported_lost_and_keeps_its_id(tmp_path: Path) -> None:
    folder, _ = _dataset(tmp_path, episodes=1)
    writer = Dataset.open(folder)
    writer._prepare_write()
    writer.backend.start_episode(example_rows(writer.schema, 30, seed=3))
    writer.close()
    spill = _archive(folder, 1, "ongoing")
    data = bytearray(spill.read_bytes())
    data[len(data) // 2] ^= 0xFF
    spill.write_bytes(bytes(data))
    dataset = Dataset.open(folder, read_only=True)
    assert dataset.num_episodes == 2
    with pytest.raises(DatasetStateError, match=r"ongoing/episode_000000001\.npz.*damaged"):
        dataset.episode(1).read()
    problems = dataset.backend.verify()  # type: ignore[attr-defined]
    assert len(problems) == 1
    assert "ongoing/episode_000000001.npz" in problems[0]
    assert "damaged" in problems[0]
    dataset.close()
