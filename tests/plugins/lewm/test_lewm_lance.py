"""stable-worldmodel's Lance recordings import exactly, through the API, the CLI and a pipeline.

The oracles are the recordings' expected files (made by a separate script with pylance and
Pillow) and what the env really did (logged inside the env), never the importer.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from tests.plugins.lewm.swm_recordings import (
    HDF5,
    IMAGES,
    INTEGERS,
    LANCE,
    MISSING_RESET,
    OBSERVATIONS,
    lance_expected_import,
    recording,
)

import episodata
from episodata_core.errors import EpisodataImportWarning, FormatError
from episodata_core.testing import assert_dataset_matches


def _import(path, destination=None, **options):
    """Import, returning the warnings episodata emitted (any other warning fails)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset, report = episodata.import_dataset("lewm", path, destination, **options)
    assert all(issubclass(w.category, EpisodataImportWarning) for w in caught), caught
    return dataset, report, [str(w.message) for w in caught]


@pytest.mark.parametrize("name", LANCE)
def test_recording_imports_its_expected_rows(name):
    rec = recording(name)
    dataset, report, _ = _import(str(rec.path))
    assert len(dataset) == len(rec.episodes)
    for e, facts in enumerate(rec.episodes):
        segment = dataset.episode(e).read()
        rows = segment.buffers
        assert len(dataset.episode(e)) == facts["transitions"] == facts["rows"] - 1
        for column in rec.columns(e):
            if column in ("action", "reward", "terminated", "truncated"):
                continue
            role = "observation" if column in OBSERVATIONS else "info"
            got, want = rows[f"{role}/{column}"], rec.rows(e, column)
            if column in INTEGERS:
                # the env's int64 comes back as int64; float32 of it is what the file holds
                assert got.dtype == np.int64
                np.testing.assert_array_equal(got.astype(np.float32), want, strict=True)
            else:
                np.testing.assert_array_equal(got, want, err_msg=column, strict=True)
        np.testing.assert_array_equal(segment.action, rec.expected[f"ep{e}/action"], strict=True)
        np.testing.assert_array_equal(segment.reward, rec.expected[f"ep{e}/reward"], strict=True)
        assert (dataset.episode(e).terminated, dataset.episode(e).truncated) == (
            facts["terminated"],
            facts["truncated"],
        )
    assert report.transitions == sum(f["transitions"] for f in rec.episodes)


@pytest.mark.parametrize("name", [*LANCE, *HDF5])
def test_transitions_are_what_the_env_did(name):
    """obs, action, next_obs and reward of every transition against the env's own log."""
    rec = recording(name)
    dataset, _, _ = _import(str(rec.path))
    for e in range(len(dataset)):
        segment = dataset.episode(e).read()
        state = rec.truth[f"ep{e}/state"]  # [T + 1, 7] float64, from the reset
        action, reward = rec.truth[f"ep{e}/action"], rec.truth[f"ep{e}/reward"]
        # 0.1.1 never recorded the reset: its rows start after the first step
        lost = 1 if rec.release == "0.1.1" else 0
        stored = segment.buffers["observation/state"]
        np.testing.assert_array_equal(stored, state[lost:].astype(stored.dtype), strict=True)
        np.testing.assert_array_equal(segment.action, action[lost:], strict=True)
        np.testing.assert_array_equal(
            segment.reward, reward[lost:].astype(segment.reward.dtype), strict=True
        )


def test_the_fixed_release_has_one_transition_per_env_step():
    rec = recording("pusht-swmmain.lance")
    dataset, report, messages = _import(str(rec.path))
    assert messages == []
    assert [len(e) for e in dataset] == [len(rec.truth[f"ep{e}/action"]) for e in range(4)]
    source = dataset.manifest.metadata["imports"][0]["source"]
    assert source["swm_release"] == "fixed"
    assert report.dangling_actions == 0


@pytest.mark.parametrize("name", ["pusht-swm0.1.1.lance", "pusht-swm0.1.1.h5"])
def test_release_0_1_1_is_recognized_and_warned_about(name):
    rec = recording(name)
    dataset, report, messages = _import(str(rec.path))
    (message,) = messages
    assert "stable-worldmodel 0.1.1" in message
    assert "reset frame" in message
    assert message.endswith(f"[{MISSING_RESET}]")
    assert [w.code for w in report.warnings] == [MISSING_RESET]
    # every episode lost its first transition: one less than the env stepped
    assert [len(e) for e in dataset] == [len(rec.truth[f"ep{e}/action"]) - 1 for e in range(4)]
    record = dataset.manifest.metadata["imports"][0]
    assert record["source"]["swm_release"] == "0.1.1"
    # the finite last-row action is the episode's first action, not one taken at the end
    assert report.dangling_actions == 0
    for e, facts in enumerate(rec.episodes):
        first_action = facts["lost_in_file"]["first_action"]
        np.testing.assert_allclose(rec.truth[f"ep{e}/action"][0], first_action)
    with pytest.raises(FormatError, match=MISSING_RESET):
        episodata.import_dataset("lewm", str(rec.path), strict=True)


def test_release_can_be_named():
    rec = recording("pusht-swm0.1.1.lance")
    # read as a fixed file: row 0's reward is discarded with a warning, last actions dangle
    dataset, report, messages = _import(str(rec.path), swm_release="fixed")
    assert [m.rsplit("[", 1)[1] for m in messages] == ["reward_row0_not_nan]"]
    assert report.dangling_actions == 4
    assert len(dataset.episode(0)) == 8


def test_jpeg_option_keeps_the_encoded_bytes():
    rec = recording("pusht-swmmain.lance")
    dataset, _, _ = _import(str(rec.path), images="jpeg")
    spec = dataset.schema["observation/pixels"]
    assert spec.shape == ()
    assert spec.np_dtype.kind == "S"
    assert spec.metadata == {"source_encoding": "jpeg", "stored": "encoded"}
    for e in range(len(dataset)):
        rows = dataset.episode(e).read().buffers
        for column in IMAGES:
            assert [bytes(b) for b in rows[f"observation/{column}"]] == rec.blobs(e, column)


def test_decoded_images_declare_layout_bounds_and_their_codec():
    dataset, _, _ = _import(str(recording("pusht-swmmain.lance").path))
    for column in IMAGES:
        spec = dataset.schema[f"observation/{column}"]
        assert (spec.shape, spec.dtype, spec.layout) == ((32, 32, 3), "uint8", "HWC")
        assert (spec.low, spec.high) == (0, 255)
        assert spec.metadata == {"source_encoding": "jpeg", "stored": "decoded"}


def test_same_run_hdf5_and_lance_agree_except_for_the_codec():
    """Both formats of one recording give the same episodes (float32 of the HDF5 values)."""
    for release in ("swmmain", "swm0.1.1"):
        lance_ds, _, _ = _import(str(recording(f"pusht-{release}.lance").path))
        hdf5_ds, _, _ = _import(str(recording(f"pusht-{release}.h5").path))
        assert [len(e) for e in lance_ds] == [len(e) for e in hdf5_ds]
        for a, b in zip(lance_ds, hdf5_ds, strict=True):
            x, y = a.read().buffers, b.read().buffers
            for key in ("observation/state", "action/action", "reward/reward"):
                np.testing.assert_array_equal(x[key], y[key].astype(x[key].dtype), err_msg=key)
            # the writer rounded the env's int64 id to float32; that is all the file holds
            want = y["info/id"].astype(np.float32).astype(np.int64)
            np.testing.assert_array_equal(x["info/id"], want, strict=True)


def test_kit_oracle_through_a_persistent_backend(tmp_path):
    for name in LANCE:
        expected = lance_expected_import(name)
        dataset, _, _ = _import(str(recording(name).path), tmp_path / name, backend="zarr")
        assert_dataset_matches(dataset, expected, where=name)
        dataset.close()
        with episodata.Dataset.open(tmp_path / name, read_only=True) as reopened:
            assert_dataset_matches(reopened, expected, where=f"{name} reopened")


def test_cli_imports_a_lance_folder(tmp_path):
    rec = recording("pusht-swm0.1.1.lance")
    destination = tmp_path / "from-cli"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "episodata_core.cli",
            "import",
            "lewm",
            str(rec.path),
            str(destination),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # the import summary names the release once (and it is not repeated as a warning)
    assert (result.stdout + result.stderr).count("stable-worldmodel 0.1.1") == 1
    with episodata.Dataset.open(destination, read_only=True) as dataset:
        assert_dataset_matches(dataset, lance_expected_import(rec.path.name), where="cli")


def test_cli_rejects_a_foreign_lance_dataset_in_one_line(tmp_path):
    from tests.plugins.lewm.swm_recordings import rewrite

    path = rewrite(LANCE[0], tmp_path, "frames.lance", lambda t: t.drop_columns(["episode_idx"]))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "episodata_core.cli",
            "import",
            "lewm",
            str(path),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "without an 'episode_idx' column" in lines[0]
    assert not (tmp_path / "out").exists()


def test_pipeline_reaches_the_lance_reader(tmp_path):
    rec = recording("pusht-swmmain.lance")
    config = tmp_path / "swm.toml"
    config.write_text(
        f'[source]\nimporter = "lewm"\npath = "{rec.path}"\noptions = {{ images = "jpeg" }}\n\n'
        f'[store]\nbackend = "npz_directory"\npath = "{tmp_path / "store"}"\n'
    )
    episodata.Pipeline.from_toml(config).run()
    with episodata.Dataset.open(tmp_path / "store", read_only=True) as dataset:
        assert len(dataset) == 4
        rows = dataset.episode(2).read().buffers
        assert [bytes(b) for b in rows["observation/pixels"]] == rec.blobs(2, "pixels")


@pytest.fixture
def spy_lance_reads(monkeypatch):
    """Record ``(columns, offset, limit)`` of every pylance table read."""
    import lance

    reads: list[tuple[tuple[str, ...], int | None, int | None]] = []
    original = lance.LanceDataset.to_table

    def spy(self, columns=None, *args, **kwargs):
        reads.append((tuple(columns or ()), kwargs.get("offset"), kwargs.get("limit")))
        return original(self, columns, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "to_table", spy)
    # JPEGs checked by an earlier test's import of the same version are not checked again
    monkeypatch.setattr("episodata_lewm._lance._CHECKED", {})
    return reads


@pytest.mark.parametrize("images", ["decode", "jpeg"])
def test_lance_reads_stay_within_the_read_budget(spy_lance_reads, images):
    name = "pusht-swmmain.lance"  # 4 episodes of 10 rows
    # two images (decoded, or JPEGs of about 1 KB) and the rest, about
    row_bytes = 2 * 32 * 32 * 3 + 200 if images == "decode" else 2 * 1000 + 100
    budget = 2 * 10 * row_bytes  # two episodes
    dataset, _, _ = _import(str(recording(name).path), read_budget_bytes=budget, images=images)
    assert_dataset_matches(
        dataset, lance_expected_import(name) if images == "decode" else _no_images(name)
    )
    assert spy_lance_reads, "pylance was not read through to_table"
    assert all(len(columns) == 1 for columns, _, _ in spy_lance_reads)  # one column per read
    # the check of every JPEG: reads of at most the budget in pixels (a JPEG is smaller)
    pixel_reads = [limit for c, _, limit in spy_lance_reads if c == ("pixels",)]
    assert max(pixel_reads) <= budget // (32 * 32 * 3)
    # the write pass: windows of two episodes (decoded) or one (about 2 KB of JPEGs a row)
    written = [limit for c, offset, limit in spy_lance_reads if c == ("state",)]
    assert max(written) == (20 if images == "decode" else 10)


def _no_images(name):
    """The oracle with the image columns as the stored JPEG bytes."""
    import dataclasses

    expected = lance_expected_import(name)
    rec = recording(name)
    episodes = []
    for e, episode in enumerate(expected.episodes):
        observations = dict(episode.observations)
        for column in IMAGES:
            blobs = rec.blobs(e, column)
            observations[column] = np.asarray(blobs, dtype=f"S{_width(rec, column)}")
        episodes.append(dataclasses.replace(episode, observations=observations))
    return dataclasses.replace(expected, episodes=episodes)


def _width(rec, column):
    return max(len(b) for e in range(len(rec.episodes)) for b in rec.blobs(e, column))


def test_hash_source_digests_the_files_of_the_version():
    import hashlib

    rec = recording("pusht-swm0.1.1.lance")
    dataset, _, _ = _import(str(rec.path), hash_source=True)
    source = dataset.manifest.metadata["imports"][0]["source"]
    # formats.md: the manifest and data files, sorted by relative path: path, NUL, bytes
    files = sorted(
        [*rec.path.glob("_versions/*.manifest"), *rec.path.glob("data/*.lance")],
        key=lambda p: p.relative_to(rec.path).as_posix(),
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(rec.path).as_posix().encode() + b"\0" + path.read_bytes())
    assert source["sha256"] == digest.hexdigest()
    assert source["bytes"] == sum(p.stat().st_size for p in files)
    assert source["bytes"] == sum(
        rec.facts["lance"]["files"][k]
        for k in rec.facts["lance"]["files"]
        if k.startswith(("_versions/1", "data/"))
    )


@pytest.mark.parametrize("images", ["decode", "jpeg"])
@pytest.mark.parametrize("destination", ["new", "append"])
@pytest.mark.parametrize("windows", ["one", "two"])
def test_each_jpeg_is_read_twice_and_decoded_once_at_most(
    tmp_path, monkeypatch, spy_lance_reads, windows, destination, images
):
    """Pillow's real decoder and pylance's reads, counted over a whole import.

    The schema pass reads and checks every JPEG (the longest blob is part of the schema);
    the write pass reads each once more and decodes it once ('decode') or not at all,
    whatever the destination and however many windows.
    """
    from PIL import Image

    path = str(recording("pusht-swmmain.lance").path)  # 40 rows, two image columns
    target = tmp_path / "out"
    if destination == "append":
        target, _, _ = _import(path, tmp_path / "base", images=images)
    calls = []
    original = Image.frombytes

    def counted(*args, **kwargs):
        calls.append(args[2] if len(args) > 2 else kwargs.get("data"))
        return original(*args, **kwargs)

    monkeypatch.setattr(Image, "frombytes", counted)
    monkeypatch.setattr("episodata_lewm._lance._CHECKED", {})  # not what the base import saw
    spy_lance_reads.clear()
    # two episodes a window: two images decoded, or two JPEGs of about 1.1 KB, a row
    row = 2 * 32 * 32 * 3 + 200 if images == "decode" else 2 * 1200
    budget = {} if windows == "one" else {"read_budget_bytes": 2 * 10 * row}
    dataset, _, _ = _import(path, target, images=images, **budget)
    assert len(calls) == (80 if images == "decode" else 0)
    for column in IMAGES:
        rows = [limit for c, _, limit in spy_lance_reads if c == (column,)]
        # row 0 for the image size (read_schema, then the import), then every row twice:
        # the check in the schema pass, which the import reuses, and the write pass
        assert sorted(rows)[:2] == [1, 1], (column, rows)
        assert sum(rows) == 2 + 2 * 40, (column, rows)
    first = 4 if destination == "append" else 0  # the appended episodes follow the first four
    expected = lance_expected_import("pusht-swmmain.lance")
    if images == "jpeg":
        expected = _no_images("pusht-swmmain.lance")
    assert_dataset_matches(dataset, expected, first=first)
