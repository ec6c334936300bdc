"""Datasets written by minari 0.5.4's own DataCollector, against what minari reads back.

The folders under ``data/datasets`` and the ``<name>.minari-read.npz`` ground truth (what
``minari.load_dataset(id).iterate_episodes()`` returned) are described in data/README.md;
minari itself is not needed here.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from minari_fixtures import TINY_ENDS, image_case, jpeg_bytes, tiny

import episodata
from episodata_core.views import FieldGroup

DATA = Path(__file__).parent / "data"
ROOT = DATA / "datasets"
NAMES = ("pendulum", "dictenv")


def _truth(name: str) -> dict[str, np.ndarray]:
    with np.load(DATA / f"{name}-v0.minari-read.npz", allow_pickle=False) as loaded:
        return {key: loaded[key] for key in loaded.files}


def _metadata(name: str) -> dict:
    return json.loads((ROOT / "interop" / f"{name}-v0" / "data" / "metadata.json").read_text())


def _pick(group, key: str) -> np.ndarray:
    """``key`` ("nested/pos", or "" for a single field) of an obs/action/info read."""
    value = group
    for part in filter(None, key.split("/")):
        value = value[part]
    assert not isinstance(value, FieldGroup), key
    return np.asarray(value)


def _fields(truth: dict[str, np.ndarray], episode: int, group: str) -> dict[str, np.ndarray]:
    prefix = f"ep{episode}/{group}"
    return {
        name.removeprefix(prefix).lstrip("/"): values
        for name, values in truth.items()
        if name == prefix or name.startswith(prefix + "/")
    }


@pytest.mark.parametrize("name", NAMES)
def test_datacollector_datasets_import_exactly_what_minari_reads(name):
    truth = _truth(name)
    dataset, report = episodata.import_dataset("minari", ROOT / "interop" / f"{name}-v0")
    ids = truth["episode_ids"].tolist()
    assert dataset.num_episodes == len(ids)
    assert report.transitions == int(truth["total_steps"])
    for index, episode_id in enumerate(ids):
        read = dataset.episode(index).read()
        for key, rows in _fields(truth, episode_id, "observations").items():
            # T + 1 observation rows: obs is rows[:-1] and next_obs rows[1:], dtypes as stored
            np.testing.assert_array_equal(_pick(read.obs, key), rows[:-1], strict=True)
            np.testing.assert_array_equal(_pick(read.next_obs, key), rows[1:], strict=True)
        for key, rows in _fields(truth, episode_id, "actions").items():
            np.testing.assert_array_equal(_pick(read.action, key), rows, strict=True)
        np.testing.assert_array_equal(read.reward, truth[f"ep{episode_id}/rewards"], strict=True)
        infos = _fields(truth, episode_id, "infos")
        for key, rows in infos.items():
            np.testing.assert_array_equal(_pick(read.info, key), rows[:-1], strict=True)
            np.testing.assert_array_equal(_pick(read.next_info, key), rows[1:], strict=True)
        if not infos:
            assert len(dataset.schema.by_role("info")) == 0
        episode = dataset.episode(index)
        assert episode.terminated == bool(truth[f"ep{episode_id}/terminations"][-1])
        assert episode.truncated == bool(truth[f"ep{episode_id}/truncations"][-1])
    (record,) = dataset.manifest.metadata["imports"]
    assert record["episodes"]["id"] == ids
    assert [str(seed) for seed in record["episodes"]["seed"]] == truth["seeds"].tolist()


def test_fields_keep_the_layout_and_bounds_of_their_spaces(tmp_path):
    dataset, _ = episodata.import_dataset("minari", ROOT / "interop" / "dictenv-v0")
    space = json.loads(_metadata("dictenv")["observation_space"])["subspaces"]
    image = dataset.schema["observation/image"]
    # the oracle is metadata.json itself: a uint8 Box(0, 255, (8, 8, 3)) is an HWC image
    assert np.all(np.asarray(space["image"]["low"]) == 0)
    assert np.all(np.asarray(space["image"]["high"]) == 255)
    assert (image.layout, image.low, image.high) == ("HWC", 0, 255)
    assert image.is_image
    pos = dataset.schema["observation/nested/pos"]
    assert (pos.low, pos.high) == (-100.0, 100.0)
    assert (pos.layout, dataset.schema["observation/state"].layout) == (None, None)
    grip = dataset.schema["action/grip"]  # Discrete(2): 0 .. 1
    assert (grip.low, grip.high) == (0, 1)
    stored = tmp_path / "pendulum.zarr"
    pendulum, _ = episodata.import_dataset("minari", ROOT / "interop" / "pendulum-v0", stored)
    box = json.loads(_metadata("pendulum")["observation_space"])
    # bounds that differ per element stay lists, as the gym plugin records them
    assert pendulum.schema["observation/observation"].low == box["low"] == [-1.0, -1.0, -8.0]
    assert pendulum.schema["observation/observation"].high == box["high"]
    assert (pendulum.schema["action/action"].low, pendulum.schema["action/action"].high) == (
        -2.0,
        2.0,
    )
    pendulum.close()
    # the bounds survive the manifest
    reopened = episodata.Dataset.open(stored, read_only=True)
    assert reopened.schema["observation/observation"].low == [-1.0, -1.0, -8.0]
    assert reopened.schema["action/action"].high == 2.0
    reopened.close()


def test_unbounded_box_sides_record_no_bound(tmp_path):
    folder = tiny(tmp_path / "unbounded-v0")
    metadata_path = folder / "data" / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    space = json.loads(metadata["observation_space"])
    space["low"] = [float("-inf"), 0.0]  # json writes -Infinity, as gymnasium's does
    metadata["observation_space"] = json.dumps(space)
    metadata_path.write_text(json.dumps(metadata))
    dataset, _ = episodata.import_dataset("minari", folder)
    spec = dataset.schema["observation/observation"]
    assert (spec.low, spec.high) == (None, 1000.0)


def _home(monkeypatch, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def test_tilde_in_a_path_is_the_home_folder(monkeypatch, tmp_path):
    home = _home(monkeypatch, tmp_path)
    shutil.copytree(ROOT / "interop" / "pendulum-v0", home / "copies" / "pendulum-v0")
    dataset, _ = episodata.import_dataset("minari", "~/copies/pendulum-v0")
    assert dataset.num_steps == 160
    dataset, _ = episodata.import_dataset("minari", "~/copies/pendulum-v0/data/main_data.hdf5")
    assert dataset.num_steps == 160


def test_dataset_ids_resolve_through_minari_datasets_path(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the id is no path relative to the working folder
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(ROOT))
    dataset, _ = episodata.import_dataset("minari", "interop/dictenv-v0")
    assert dataset.num_steps == 30
    (record,) = dataset.manifest.metadata["imports"]
    assert record["source"]["dataset_id"] == "interop/dictenv-v0"
    # an id minari does not have names the root, the versions it has, and the fixes
    with pytest.raises(FileNotFoundError) as caught:
        episodata.import_dataset("minari", "interop/dictenv-v7")
    message = str(caught.value)
    assert f"MINARI_DATASETS_PATH = {str(ROOT)!r}" in message
    assert "Local versions: ['interop/dictenv-v0']" in message
    assert "minari download interop/dictenv-v7" in message


def test_dataset_ids_resolve_in_minaris_default_root(monkeypatch, tmp_path):
    home = _home(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    shutil.copytree(ROOT, home / ".minari" / "datasets")
    dataset, _ = episodata.import_dataset("minari", "interop/pendulum-v0")
    assert dataset.num_steps == 160
    with pytest.raises(FileNotFoundError, match=r"~/.minari/datasets \(\$MINARI_DATASETS_PATH is"):
        episodata.import_dataset("minari", "interop/absent-v0")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "episodata_core.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_cli_imports_an_id_and_info_counts_add_up(tmp_path):
    # one episode terminated, one truncated, one with both flags; imported by its id
    tiny(tmp_path / "root" / "test" / "ends-v0")
    work = tmp_path / "work"  # where the id is no path
    work.mkdir()
    destination = work / "ends"
    environment = {"MINARI_DATASETS_PATH": str(tmp_path / "root")}
    result = _cli("import", "minari", "test/ends-v0", str(destination), env=environment)
    assert result.returncode == 0, result.stderr
    info = _cli("info", str(destination))
    assert info.returncode == 0, info.stderr
    ends = [(bool(a), bool(b)) for a, b in TINY_ENDS]
    expected = (
        f"episodes: 3 (3 finalized: {ends.count((True, False))} terminated, "
        f"{ends.count((False, True))} truncated, {ends.count((True, True))} both, "
        f"{ends.count((False, False))} neither; 0 ongoing)"
    )
    assert expected in info.stdout, info.stdout


def test_jpeg_images_are_decoded_by_default(tmp_path):
    from PIL import Image

    folder, originals = image_case(tmp_path / "default-v0", "vlen")
    dataset, _ = episodata.import_dataset("minari", folder)
    spec = dataset.schema["observation/observation"]
    assert (spec.shape, spec.dtype, spec.layout, spec.low, spec.high) == (
        (64, 64, 3),
        "uint8",
        "HWC",
        0,
        255,
    )
    for index, images in enumerate(originals):
        read = dataset.episode(index).read()
        for row, image in enumerate(images[:-1]):
            reference = np.asarray(Image.open(io.BytesIO(jpeg_bytes(image))))
            np.testing.assert_array_equal(read.obs[row], reference)


@pytest.mark.parametrize("storage", ["vlen", "padded"])
def test_decode_images_false_keeps_the_jpeg_bytes(tmp_path, storage):
    from PIL import Image

    folder, originals = image_case(tmp_path / f"kept-{storage}-v0", storage)
    dataset, _ = episodata.import_dataset("minari", folder, decode_images=False)
    encoded = [[jpeg_bytes(image) for image in images] for images in originals]
    longest = max(len(data) for images in encoded for data in images)
    spec = dataset.schema["observation/observation"]
    assert (spec.shape, spec.dtype, spec.layout) == ((longest,), "uint8", None)
    assert spec.metadata == {"encoding": "jpeg", "image_shape": [64, 64, 3]}
    (record,) = dataset.manifest.metadata["imports"]
    assert record["source"]["jpeg_bytes_kept"] == ["observations"]
    assert record["source"]["decoded_images"] == []
    for index, images in enumerate(encoded):
        read = dataset.episode(index).read()
        rows = np.concatenate([read.obs[:1], read.next_obs])
        for row, data in enumerate(images):
            # the very bytes minari stored, then zeros up to the longest image
            assert rows[row][: len(data)].tobytes() == data
            assert not rows[row][len(data) :].any()
            decoded = np.asarray(Image.open(io.BytesIO(rows[row].tobytes())))
            np.testing.assert_array_equal(decoded, np.asarray(Image.open(io.BytesIO(data))))
