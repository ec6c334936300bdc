"""Malformed Minari datasets: the error type, a message naming the place, nothing written."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from minari_fixtures import BAD_CASES, bad, image_case, tiny

import episodata
from episodata_core.errors import EpisodataError, MissingDependencyError
from episodata_core.registry import get_backend
from episodata_minari import MinariImporter, MinariOptions


def _persistent_backend() -> str:
    for name in ("zarr", "npz_directory"):
        try:
            get_backend(name)
        except EpisodataError:
            continue
        return name
    pytest.skip("no persistent backend is usable here")


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_dataset_raises_and_leaves_no_destination(sources, tmp_path, case):
    made = bad(sources, case)
    destination = tmp_path / "out"
    with pytest.raises(made.error, match=re.escape(made.fragment)) as caught:
        episodata.import_dataset(
            "minari", made.source, destination, backend=_persistent_backend(), **made.options
        )
    assert str(made.source) in str(caught.value)  # the message names the dataset
    assert not destination.exists()
    assert list(tmp_path.iterdir()) == []


# the image case has another schema: test_corrupt_jpeg_is_found_before_the_first_write
@pytest.mark.parametrize("case", [c for c in BAD_CASES if c != "corrupt_jpeg"])
def test_bad_dataset_leaves_an_appended_dataset_unchanged(sources, case):
    made = bad(sources / "append", case)
    good, _ = episodata.import_dataset("minari", tiny(sources / f"good-{case}-v0"))
    with pytest.raises(made.error, match=re.escape(made.fragment)):
        episodata.import_dataset("minari", made.source, good, **made.options)
    assert (good.num_episodes, good.num_steps) == (3, 9)
    assert len(good.manifest.metadata["imports"]) == 1


@pytest.mark.parametrize("case", ["early_flag", "flag_value_2", "corrupt_jpeg"])
def test_value_checks_run_in_import_into(sources, case):
    # read_schema reads headers only; these are caught later, still before the first write
    made = bad(sources / "schema", case)
    schema = MinariImporter().read_schema(str(made.source), MinariOptions(**made.options))
    assert made.after_schema
    assert len(schema) == (3 if case == "corrupt_jpeg" else 4)  # the image case has no infos


def test_corrupt_jpeg_is_found_before_the_first_write(sources, tmp_path):
    folder, _ = image_case(tmp_path / "images-v0", "vlen")
    dataset, _ = episodata.import_dataset("minari", folder, decode_images=True)
    made = bad(sources / "append-images", "corrupt_jpeg")
    # episode 0 decodes; episode 1's row 2 does not: nothing of episode 0 is written either
    with pytest.raises(made.error, match=re.escape(made.fragment)):
        episodata.import_dataset("minari", made.source, dataset, **made.options)
    assert dataset.num_episodes == 2


def test_missing_pillow_names_the_install_command(sources, tmp_path, monkeypatch):
    folder, _ = image_case(tmp_path / "pillow-v0", "vlen")
    monkeypatch.setitem(sys.modules, "PIL", None)  # makes `import PIL` fail as if absent
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    destination = tmp_path / "out"
    # images are decoded by default: the error names the extra that installs Pillow
    pattern = r"decode_images=False to keep the bytes .* Pillow, which is not installed: pip "
    with pytest.raises(
        MissingDependencyError, match=pattern + re.escape('install "episodata[minari]"')
    ):
        episodata.import_dataset("minari", folder, destination)
    assert not destination.exists()
    # keeping the bytes needs no Pillow
    kept, _ = episodata.import_dataset("minari", folder, decode_images=False)
    assert kept.schema["observation/observation"].dtype == "uint8"
    # without JPEG-encoded fields Pillow is not needed, even with decode_images=True
    dataset, _ = episodata.import_dataset("minari", tiny(sources / "no-pil-v0"), decode_images=True)
    assert dataset.num_episodes == 3


WITHOUT_H5PY = """
import json, sys
sys.modules["h5py"] = None  # makes `import h5py` fail as if it were absent
import episodata
from episodata_core.errors import MissingDependencyError
try:
    episodata.import_dataset("minari", "whatever")
except MissingDependencyError as err:
    print(json.dumps({"message": str(err), "import_error": isinstance(err, ImportError)}))
"""


def test_missing_h5py_names_the_install_command():
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_H5PY], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert 'pip install "episodata[minari]"' in report["message"]
    assert report["import_error"]


def test_importing_the_plugin_imports_neither_h5py_nor_pillow():
    code = (
        "import sys, episodata_minari; episodata_minari.MinariOptions.model_json_schema(); "
        "print(sorted(m for m in ('h5py', 'hdf5plugin', 'PIL') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
