"""Datasets written by episodata 0.2.0 open, read exactly, sample, and migrate.

The fixtures in ``tests/data/episodata-0.2`` were written by 0.2.0 itself; their truth
files hold the values that were fed to it (the oracle). Nothing here writes to them: the
tests work on copies in ``tmp_path`` and check that the copies are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from episodata import Dataset
from episodata_core.cli import main
from episodata_core.errors import DatasetStateError, EpisodataError, SchemaError
from episodata_core.generations import FORMAT_GENERATION, detect_generation
from episodata_core.manifest import read_manifest_document

DATA = Path(__file__).resolve().parents[1] / "data" / "episodata-0.2"
FIXTURES = ("online-zarr", "from-episodes-npz")


def _materialize(name: str, tmp_path: Path) -> Path:
    if name == "online-zarr":
        with tarfile.open(DATA / "online-zarr.tar.gz") as archive:
            archive.extractall(tmp_path, filter="data")
        return tmp_path / "online-zarr"
    return Path(shutil.copytree(DATA / name, tmp_path / name))


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _truth(name: str) -> tuple[list[dict[str, object]], dict[str, np.ndarray]]:
    episodes = json.loads((DATA / f"{name}.truth.json").read_text())["episodes"]
    with np.load(DATA / f"{name}.truth.npz", allow_pickle=False) as arrays:
        return episodes, {key: arrays[key] for key in arrays.files}


def _check_against_truth(dataset: Dataset, name: str) -> None:
    episodes, arrays = _truth(name)
    assert dataset.num_episodes == len(episodes)
    for truth in episodes:
        e = int(truth["id"])
        episode = dataset.episode(e)
        assert (episode.terminated, episode.truncated, episode.ongoing) == (
            truth["terminated"],
            truth["truncated"],
            truth["ongoing"],
        ), f"episode {e}"
        segment = episode.read()
        assert segment.reward.shape[0] == truth["length"], f"episode {e}"
        wanted = {k.split("/", 1)[1] for k in arrays if k.startswith(f"ep{e}/")}
        absent = set(truth["absent_fields"])  # type: ignore[arg-type]
        for spec in dataset.schema:
            qualified = spec.qualified_key
            if qualified in absent:
                assert qualified not in wanted
                continue
            if truth["length"] == 0 and spec.role in ("action", "reward"):
                # a T=0 episode has no action/reward entries in the truth: zero transitions
                assert f"ep{e}/{qualified}" not in arrays
                expected = np.zeros((0, *spec.shape), spec.np_dtype)
            else:
                expected = arrays[f"ep{e}/{qualified}"]
            if spec.role == "observation":
                got = segment.all_obs[spec.key]
            elif spec.role == "info":
                got = segment.all_infos[spec.key]
            elif spec.role == "action":
                got = segment.action[spec.key]
            else:
                got = segment.reward
            assert got.dtype == expected.dtype, f"episode {e} {qualified}"
            np.testing.assert_array_equal(got, expected, err_msg=f"episode {e} {qualified}")
        for qualified in absent:
            role, key = qualified.split("/", 1)
            assert key not in (segment.all_infos if role == "info" else {}), qualified


@pytest.mark.parametrize("name", FIXTURES)
def test_a_02_dataset_opens_and_reads_its_truth(name: str, tmp_path: Path) -> None:
    folder = _materialize(name, tmp_path)
    before = _tree_digest(folder)
    dataset = Dataset.open(folder)
    assert dataset.manifest.format_generation == "0.2"
    assert dataset.read_only
    _check_against_truth(dataset, name)
    dataset.close()
    assert _tree_digest(folder) == before, "opening and reading a 0.2 dataset changed its files"


@pytest.mark.parametrize("name", FIXTURES)
def test_sampled_batches_of_a_02_dataset_equal_the_truth(name: str, tmp_path: Path) -> None:
    folder = _materialize(name, tmp_path)
    dataset = Dataset.open(folder)
    _, arrays = _truth(name)
    stream = dataset.segment_stream(sequence_length=3, batch_size=32, seed=1, pad="suffix")
    seen: set[tuple[int, int]] = set()
    for _ in range(4):
        batch = stream.sample()
        for b in range(32):
            real = batch.mask[b]
            # the state field says where a window starts: [e, t, 100 e + t, t / 2, -t]
            e, t = (int(v) for v in batch.obs.state[b, 0, :2])
            seen.add((e, t))
            n = int(real.sum())
            np.testing.assert_array_equal(
                batch.obs.camera[b, :n], arrays[f"ep{e}/observation/camera"][t : t + n]
            )
            np.testing.assert_array_equal(
                batch.next_obs.state[b, :n], arrays[f"ep{e}/observation/state"][t + 1 : t + 1 + n]
            )
            np.testing.assert_array_equal(
                batch.action.move[b, :n], arrays[f"ep{e}/action/move"][t : t + n]
            )
            np.testing.assert_array_equal(
                batch.action["keyboard/jump"][b, :n],
                arrays[f"ep{e}/action/keyboard/jump"][t : t + n],
            )
            np.testing.assert_array_equal(
                batch.reward[b, :n], arrays[f"ep{e}/reward/reward"][t : t + n]
            )
            np.testing.assert_array_equal(
                batch.next_info.level[b, :n], arrays[f"ep{e}/info/level"][t + 1 : t + 1 + n]
            )
            note = arrays.get(f"ep{e}/info/note")
            if note is not None:
                np.testing.assert_array_equal(batch.info.note[b, :n], note[t : t + n])
            else:  # the absent optional field reads as zeros in a batch
                assert not batch.info.note[b].any()
    assert len({e for e, _ in seen}) >= 3, "the stream sampled from most episodes"


@pytest.mark.parametrize("name", FIXTURES)
def test_writing_to_a_02_dataset_is_refused_with_the_way_to_migrate(
    name: str, tmp_path: Path
) -> None:
    folder = _materialize(name, tmp_path)
    before = _tree_digest(folder)
    dataset = Dataset.open(folder)
    episode = {
        "initial_observation": {
            "camera": np.zeros((3, 8, 8), np.uint8),
            "state": np.zeros(5, np.float32),
        },
        "observations": {
            "camera": np.zeros((1, 3, 8, 8), np.uint8),
            "state": np.zeros((1, 5), np.float32),
        },
        "actions": {"move": np.zeros((1, 2), np.float32), "keyboard/jump": np.zeros(1, bool)},
        "rewards": np.zeros(1, np.float32),
        "initial_info": {"level": np.int32(0)},
        "infos": {"level": np.zeros(1, np.int32)},
    }
    with pytest.raises(DatasetStateError, match=r"format generation 0\.2.*episodata migrate"):
        dataset.add_episode(episode)
    assert dataset.num_episodes == 5
    assert _tree_digest(folder) == before


@pytest.mark.parametrize("name", FIXTURES)
def test_migrate_keeps_every_episode_flag_info_and_ongoing_episode(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _materialize(name, tmp_path)
    target = tmp_path / "migrated"
    assert main(["migrate", str(folder), str(target), "-q"]) == 0
    document = json.loads((target / "manifest.json").read_text())
    assert document["format_generation"] == FORMAT_GENERATION
    assert document["backend"] == json.loads((folder / "manifest.json").read_text())["backend"]
    migrated = Dataset.open(target)
    assert migrated.manifest.format_generation == FORMAT_GENERATION
    _check_against_truth(migrated, name)
    # the migrated dataset is today's: it takes new episodes
    ongoing = [e for e in range(migrated.num_episodes) if migrated.episode(e).ongoing]
    assert len(ongoing) == 1
    migrated.close()


def test_migrate_to_another_backend(tmp_path: Path) -> None:
    folder = _materialize("from-episodes-npz", tmp_path)
    target = tmp_path / "as-zarr"
    assert main(["migrate", str(folder), str(target), "--backend", "zarr", "-q"]) == 0
    migrated = Dataset.open(target)
    assert migrated.manifest.backend == "zarr"
    _check_against_truth(migrated, "from-episodes-npz")
    migrated.close()


def test_an_interrupted_migration_never_looks_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _materialize("from-episodes-npz", tmp_path)
    # a damaged archive late in the dataset stops the migration after earlier episodes
    damaged = folder / "episodes" / "ep_000003.npz"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    target = tmp_path / "migrated"
    assert main(["migrate", str(folder), str(target), "-q"]) == 1
    err = capsys.readouterr().err
    assert "ep_000003.npz" in err
    assert len(err.strip().splitlines()) == 1
    if target.exists():
        with pytest.raises(EpisodataError):
            Dataset.open(target)


def test_a_damaged_02_archive_raises_instead_of_reading_garbage(tmp_path: Path) -> None:
    folder = _materialize("from-episodes-npz", tmp_path)
    damaged = folder / "episodes" / "ep_000001.npz"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    dataset = Dataset.open(folder)
    with pytest.raises(SchemaError, match=r"ep_000001\.npz"):
        dataset.episode(1).read()


def test_a_02_manifest_path_outside_the_folder_is_refused(tmp_path: Path) -> None:
    folder = _materialize("from-episodes-npz", tmp_path)
    outside = tmp_path / "elsewhere.npz"
    shutil.copy(folder / "episodes" / "ep_000000.npz", outside)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["storage"]["episodes"][0]["file"] = "../elsewhere.npz"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(EpisodataError, match="outside the dataset folder"):
        Dataset.open(folder)


def test_a_02_zarr_index_that_disagrees_with_the_arrays_is_refused(tmp_path: Path) -> None:
    folder = _materialize("online-zarr", tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["schema"]["fields"][1]["shape"] = [6]  # state is [5] in the arrays
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SchemaError, match=r"fields/state.*expected float32 \[rows, 6\]"):
        Dataset.open(folder)


@pytest.mark.parametrize("name", FIXTURES)
def test_02_datasets_are_recognized_as_generation_02_by_their_layout(
    name: str, tmp_path: Path
) -> None:
    folder = _materialize(name, tmp_path)
    document = read_manifest_document(str(folder))
    assert "format_generation" not in document  # 0.2 names no generation
    assert detect_generation(str(folder), document) == "0.2"


# ``episodata migrate`` in a child process, one commit per episode; prints each source
# episode it reads, so that the parent can kill it in the middle
CHILD_MIGRATE = """
import sys, time
import episodata_core._batching
from episodata_core.cli import main
from episodata_npz._gen02 import Npz02Backend

episodata_core._batching.BATCH_BYTES = 1
read_rows = Npz02Backend.read_rows

def reporting(self, episode, start, stop, fields):
    print(episode, flush=True)
    time.sleep(0.05)
    return read_rows(self, episode, start, stop, fields)

Npz02Backend.read_rows = reporting
sys.exit(main(sys.argv[1:]))
"""


def test_a_migration_killed_midway_is_marked_incomplete_and_resumes(tmp_path: Path) -> None:
    folder = _materialize("from-episodes-npz", tmp_path)
    target = tmp_path / "migrated"
    command = ["migrate", str(folder), str(target), "--backend", "zarr", "-q"]
    with subprocess.Popen(
        [sys.executable, "-c", CHILD_MIGRATE, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip() == "3":  # episodes 0..2 were handed over, 3 is being read
                break
        else:
            pytest.fail(f"the migration ended early (exit {process.wait()})")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    with pytest.raises(DatasetStateError, match=r"incomplete: copy\b.*interrupted after"):
        Dataset.open(target)
    partial = Dataset.open(target, read_only=True, allow_incomplete=True)
    assert 0 < partial.num_episodes < 5
    partial.close()
    assert main([*command, "--resume"]) == 0
    migrated = Dataset.open(target)
    _check_against_truth(migrated, "from-episodes-npz")
    migrated.close()


def test_a_02_zarr_dataset_with_other_shard_sizes_reads_the_same(tmp_path: Path) -> None:
    # 0.2's chunk_bytes/shard_bytes options give several shard files per array: rewrite
    # every array of the fixture with zarr-python, 2 rows per chunk and 4 per shard
    zarr = pytest.importorskip("zarr")
    folder = _materialize("online-zarr", tmp_path)
    root = folder / "data.zarr"
    for meta in sorted(root.rglob("zarr.json")):
        path = meta.parent
        source = zarr.open_array(str(path), mode="r")
        values, fill = source[...], source.fill_value
        shutil.rmtree(path)
        target = zarr.create_array(
            str(path),
            shape=values.shape,
            dtype=values.dtype,
            chunks=(2, *values.shape[1:]),
            shards=(4, *values.shape[1:]),
            fill_value=fill,
            compressors=None,
            zarr_format=3,
        )
        target[...] = values
    assert len(list((root / "fields" / "camera" / "c").iterdir())) == 5  # 19 rows, 4 a shard
    for group in (root, root / "fields", root / "index"):
        (group / "zarr.json").unlink(missing_ok=True)  # 0.2 writes no group metadata
    dataset = Dataset.open(folder)
    _check_against_truth(dataset, "online-zarr")
