"""Damaged or foreign Lance datasets: a clear error each (file, column, row, fix), nothing written.

The damaged datasets are made from the recordings with pylance itself, so they are what a
real writer (or a real cut-off copy) leaves behind.
"""

from __future__ import annotations

import re
import warnings

import lance
import numpy as np
import pyarrow as pa
import pytest
from tests.plugins.lewm.swm_recordings import LANCE, recording, rewrite, writable_copy

import episodata
from episodata_core.errors import EpisodataImportWarning, FormatError, PartialFileError

MAIN = LANCE[0]


def _set_column(table, name, values):
    return table.set_column(table.schema.get_field_index(name), name, values)


def _blob(row, make):
    def change(table):
        blobs = table["pixels"].to_pylist()
        blobs[row] = make(blobs[row])
        return _set_column(table, "pixels", pa.array(blobs, pa.binary()))

    return change


def _float_list(name, row, value):
    def change(table):
        column = table[name].combine_chunks()
        values = column.flatten().to_numpy().copy()
        size = column.type.list_size
        values[row * size] = value
        return _set_column(table, name, pa.FixedSizeListArray.from_arrays(pa.array(values), size))

    return change


def _null_state(table):
    column = table["state"].combine_chunks()
    mask = np.zeros(len(column), dtype=bool)
    mask[7] = True
    rebuilt = pa.FixedSizeListArray.from_arrays(column.flatten(), 7, mask=pa.array(mask))
    return _set_column(table, "state", rebuilt)


def _split_episode(table):
    index = table["episode_idx"].to_numpy().copy()
    index[20:30] = 0  # episode 2 numbered 0 again: episode 0 is no longer contiguous
    return _set_column(table, "episode_idx", pa.array(index, pa.int32()))


def _small_jpeg():
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (9, 99, 199)).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def _oversampled(blob):
    """Every component sampled 2x2: 12 blocks per MCU, more than libjpeg's (and T.81's) 10."""
    frame = blob.index(b"\xff\xc0")
    changed = bytearray(blob)
    for component in range(3):
        changed[frame + 11 + 3 * component] = 0x22
    return bytes(changed)


def _truncated(directory):
    path = writable_copy(MAIN, directory)
    (data,) = (path / "data").iterdir()
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    return path


CASES = {
    "no_episode_idx": (
        lambda d: rewrite(MAIN, d, "frames.lance", lambda t: t.drop_columns(["episode_idx"])),
        FormatError,
        "is a Lance dataset without an 'episode_idx' column",
    ),
    "not_lance": (
        lambda d: (d / "empty.lance").mkdir(exist_ok=True) or d / "empty.lance",
        FormatError,
        "is not a Lance dataset (no _versions/ folder)",
    ),
    "truncated_data_file": (
        _truncated,
        PartialFileError,
        "bytes, the manifest records 97629; the copy or download did not finish",
    ),
    "cut_jpeg": (
        lambda d: rewrite(MAIN, d, "cut.lance", _blob(13, lambda b: b[: len(b) // 2])),
        FormatError,
        "column 'pixels', row 13",
    ),
    "zeroed_jpeg": (
        lambda d: rewrite(
            MAIN, d, "zeroed.lance", _blob(27, lambda b: b[:400] + bytes(200) + b[600:])
        ),
        FormatError,
        "column 'pixels', row 27: the JPEG is damaged at byte 417 of 1052: a bad Huffman table",
    ),
    "oversampled_jpeg": (
        lambda d: rewrite(MAIN, d, "oversampled.lance", _blob(33, _oversampled)),
        FormatError,
        "column 'pixels', row 33: the JPEG is damaged at byte 158 of 1058: more than 10 blocks",
    ),
    "not_a_jpeg": (
        lambda d: rewrite(MAIN, d, "png.lance", _blob(3, lambda b: b"\x89PNG" + b[4:])),
        FormatError,
        "column 'pixels', row 3",
    ),
    "resized_jpeg": (
        lambda d: rewrite(MAIN, d, "resized.lance", _blob(9, lambda b: _small_jpeg())),
        FormatError,
        (
            "column 'pixels', row 9: the JPEG is 16x16 with 3 channel(s), but the column's "
            "first image is 32x32 with 3"
        ),
    ),
    "fractional_id": (
        lambda d: rewrite(MAIN, d, "id.lance", _float_list("id", 5, 0.5)),
        FormatError,
        (
            "column 'id' must hold a whole number in the range of int64 (int64 in the env, "
            "float32 in the file), but 1 row(s) do not: row 5: [0.5]"
        ),
    ),
    "nan_n_contacts": (
        lambda d: rewrite(MAIN, d, "contacts.lance", _float_list("n_contacts", 33, np.nan)),
        FormatError,
        "column 'n_contacts' must hold a whole number",
    ),
    "null_state": (
        lambda d: rewrite(MAIN, d, "null.lance", _null_state),
        FormatError,
        "column 'state' holds null values (rows [7])",
    ),
    "split_episode": (
        lambda d: rewrite(MAIN, d, "split.lance", _split_episode),
        FormatError,
        "episode 0 is split into runs starting at rows [0, 20]",
    ),
}


def _bad(tmp_path, case):
    make, error, fragment = CASES[case]
    return make(tmp_path), error, fragment


@pytest.mark.parametrize("case", CASES)
def test_bad_dataset_raises_and_leaves_no_destination(tmp_path, case):
    path, error, fragment = _bad(tmp_path, case)
    destination = tmp_path / "out"
    with pytest.raises(error, match=re.escape(fragment)) as caught:
        episodata.import_dataset("lewm", str(path), destination, backend="zarr")
    assert str(path) in str(caught.value)
    assert not destination.exists()


@pytest.mark.parametrize("case", CASES)
def test_bad_dataset_leaves_an_appended_dataset_unchanged(tmp_path, case):
    dataset, _ = episodata.import_dataset("lewm", str(recording(MAIN).path))
    before = (len(dataset), dataset.num_steps, dataset.manifest.metadata)
    path, error, fragment = _bad(tmp_path, case)
    with pytest.raises(error, match=re.escape(fragment)):
        episodata.import_dataset("lewm", str(path), dataset)
    assert (len(dataset), dataset.num_steps, dataset.manifest.metadata) == before


def test_a_corrupt_jpeg_fails_when_kept_as_bytes_too(tmp_path):
    path, error, fragment = _bad(tmp_path, "zeroed_jpeg")
    with pytest.raises(error, match=re.escape(fragment)):
        episodata.import_dataset("lewm", str(path), images="jpeg")


def test_the_latest_of_several_versions_is_read_and_named(tmp_path):
    path = writable_copy(MAIN, tmp_path)
    lance.dataset(str(path)).delete("episode_idx = 3")  # version 2: three episodes
    with pytest.warns(
        EpisodataImportWarning,
        match=r"2 versions \(1 to 2\); read version 2 "
        r"\(the latest\)",
    ) as caught:
        dataset, report = episodata.import_dataset("lewm", str(path))
    assert len(caught) == 1
    assert len(dataset) == 3
    assert report.rows_read == 30
    source = dataset.manifest.metadata["imports"][0]["source"]
    assert (source["lance_version"], source["lance_versions"]) == (2, 2)
    # the deletion file is part of what version 2 reads
    assert (
        source["bytes"]
        == sum(
            p.stat().st_size for p in [*(path / "data").iterdir(), *(path / "_deletions").iterdir()]
        )
        + next((path / "_versions").glob(f"{(1 << 64) - 3}.manifest")).stat().st_size
    )
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        older, _ = episodata.import_dataset("lewm", str(path), lance_version=1)
    assert len(older) == 4


def test_a_missing_path_names_both_formats(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"pass an swm \.h5 file or \.lance folder"):
        episodata.import_dataset("lewm", str(tmp_path / "nothing.lance"))


def test_column_dtypes_names_columns_of_the_dataset():
    path = str(recording(MAIN).path)
    with pytest.raises(FormatError, match=r"column_dtypes names \['nope'\], which are not columns"):
        episodata.import_dataset("lewm", path, column_dtypes={"nope": "int64"})
    with pytest.raises(FormatError, match="converts float columns that hold integers only"):
        episodata.import_dataset("lewm", path, column_dtypes={"step_idx": "int64"})


def test_column_dtypes_replaces_the_defaults():
    rec = recording(MAIN)
    dataset, _ = episodata.import_dataset("lewm", str(rec.path), column_dtypes={})
    # without the default conversion, id stays the float32 the file holds
    got = dataset.episode(1).read().buffers["info/id"]
    np.testing.assert_array_equal(got, rec.rows(1, "id"), strict=True)


def test_a_dataset_written_again_at_the_same_path_is_read_anew(tmp_path):
    """The JPEG width found for one dataset is never reused for another at the same path."""
    import io

    from PIL import Image

    first = rewrite(MAIN, tmp_path, "again.lance", lambda t: t)
    episodata.import_dataset("lewm", str(first), images="jpeg")
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, "JPEG", quality=95)
    big = buffer.getvalue()  # far longer than any blob of the recording
    second = rewrite(MAIN, tmp_path, "again.lance", _blob(0, lambda _: big))
    assert second == first
    dataset, _ = episodata.import_dataset("lewm", str(second), images="jpeg", validate="structure")
    assert bytes(dataset.episode(0).read().buffers["observation/pixels"][0]) == big


@pytest.mark.parametrize("images", ["decode", "jpeg"])
@pytest.mark.parametrize("budget", [None, 2 * 10 * (2 * 32 * 32 * 3 + 200)])
@pytest.mark.parametrize("destination", ["new", "append"])
def test_a_jpeg_that_libjpeg_refuses_fails_before_anything_is_written(
    tmp_path, budget, destination, images
):
    """Row 33 (the last episode) has well-formed segments but 12 blocks per MCU.

    Every JPEG is checked when the schema is made, before the destination exists, in
    one window or in several; kept as bytes too (no decoder could read them back).
    """
    path, error, fragment = _bad(tmp_path, "oversampled_jpeg")
    options = {"images": images}
    if budget is not None:
        options["read_budget_bytes"] = budget
    if destination == "new":
        target = tmp_path / "out"
        with pytest.raises(error, match=re.escape(fragment)):
            episodata.import_dataset("lewm", str(path), target, **options)
        assert not target.exists()
    else:
        base = recording(MAIN).path
        dataset, _ = episodata.import_dataset("lewm", str(base), tmp_path / "d", images=images)
        before = (len(dataset), dataset.num_steps, dataset.manifest.metadata)
        with pytest.raises(error, match=re.escape(fragment)) as caught:
            episodata.import_dataset("lewm", str(path), dataset, **options)
        assert "written before the failure" not in "".join(getattr(caught.value, "__notes__", []))
        assert (len(dataset), dataset.num_steps, dataset.manifest.metadata) == before
