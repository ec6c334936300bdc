"""The structure check of JPEG columns, against Pillow's decoder as the oracle.

Every blob that Pillow cannot decode must be rejected by the check or left to a decode
(uncovered); every JPEG that Pillow and the recordings write must pass.
"""

from __future__ import annotations

import io
import re

import lance
import numpy as np
import pyarrow as pa
import pytest
from PIL import Image
from tests.plugins.lewm.swm_recordings import IMAGES, LANCE, recording, rewrite

import episodata
from episodata_core.errors import FormatError
from episodata_lewm._jpegcheck import binary_buffers, check_structure


def _check(blobs, shape=None, first_row=0):
    offsets, data = binary_buffers(pa.array(blobs, pa.binary()))
    return check_structure(offsets, data, "col", first_row, shape)


def _decodes(blob, shape):
    try:
        Image.frombytes("RGB", shape[1::-1], blob, "jpeg", "RGB", "")
    except (OSError, ValueError):
        return False
    return True


def _jpeg(frame, **options):
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, "JPEG", **options)
    return buffer.getvalue()


def _blobs(name, column):
    return lance.dataset(str(recording(name).path)).to_table(columns=[column])[column].to_pylist()


@pytest.mark.parametrize("name", LANCE)
@pytest.mark.parametrize("column", IMAGES)
def test_every_jpeg_of_the_recordings_passes_covered(name, column):
    uncovered = _check(_blobs(name, column), (32, 32, 3))
    assert not uncovered.any()


def test_what_pillow_writes_passes_and_what_the_check_cannot_follow_is_left_to_a_decode():
    rng = np.random.default_rng(3)
    frame = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
    variants = {
        "baseline": (_jpeg(frame, quality=95), False),
        "optimized tables": (_jpeg(frame, quality=80, optimize=True), False),
        "4:4:4": (_jpeg(frame, subsampling=0), False),
        "restart markers": (_jpeg(frame, restart_marker_blocks=2), False),
        "progressive": (_jpeg(frame, progressive=True), True),
    }
    names = list(variants)
    uncovered = _check([variants[n][0] for n in names], (40, 48, 3))
    assert dict(zip(names, uncovered.tolist(), strict=True)) == {n: variants[n][1] for n in names}
    grey = _jpeg(frame[..., 0])
    assert not _check([grey], (40, 48, 1)).any()


def test_a_frame_of_another_size_is_named_with_both_sizes():
    small = _jpeg(np.zeros((16, 16, 3), dtype=np.uint8))
    blobs = [*_blobs(LANCE[0], "pixels")[:5], small]
    message = (
        "col, row 105: the JPEG is 16x16 with 3 channel(s), but the column's first image "
        "is 32x32 with 3"
    )
    with pytest.raises(FormatError, match=re.escape(message)):
        _check(blobs, (32, 32, 3), first_row=100)


def test_the_first_damaged_row_is_named_with_its_byte():
    blobs = _blobs(LANCE[0], "pixels")[:12]
    cut = blobs[9][: len(blobs[9]) // 2]
    stray = bytearray(blobs[4])
    stray[700:702] = b"\xff\xc4"  # a marker inside the compressed data
    blobs[9], blobs[4] = cut, bytes(stray)
    with pytest.raises(FormatError, match=r"col, row 4: the JPEG is damaged at byte 700 of"):
        _check(blobs)
    with pytest.raises(FormatError, match=r"col, row 9: .* does not start with FF D8 and end"):
        _check(blobs[5:], first_row=5)


def _damaged(blob, rng, frame):
    """``blob`` with a run zeroed, a bit flipped, random, lost or inserted bytes, not in ``frame``."""
    changed = bytearray(blob)
    while True:
        at = int(rng.integers(2, len(blob) - 2))
        if not frame[0] <= at < frame[1]:
            break
    size = min(int(rng.integers(1, 40)), len(blob) - 2 - at)
    kind = rng.integers(5)
    if kind == 0:
        changed[at : at + size] = bytes(size)
    elif kind == 1:
        changed[at] ^= 1 << int(rng.integers(8))
    elif kind == 2:
        changed[at : at + size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    elif kind == 3:  # bytes lost
        del changed[at : at + min(size, 8)]
    else:  # bytes inserted
        changed[at:at] = rng.integers(0, 256, min(size, 8), dtype=np.uint8).tobytes()
    return bytes(changed)


def _changed(blob, marker, offset, value):
    """``blob`` with byte ``offset`` of the segment of ``marker`` (its FF) set to ``value``."""
    changed = bytearray(blob)
    changed[blob.index(marker) + offset] = value
    return bytes(changed)


# headers that libjpeg refuses (not only warns about) though every segment is well-formed
_REFUSED = {
    # all three components 2x2: 12 blocks per MCU, over libjpeg's (and T.81's) 10
    "12 blocks per MCU": (
        lambda b: _changed(
            _changed(_changed(b, b"\xff\xc0", 11, 0x22), b"\xff\xc0", 14, 0x22),
            b"\xff\xc0",
            17,
            0x22,
        ),
        "more than 10 blocks per MCU",
    ),
    # luma 2x2, one chroma 3x1: 3 does not divide 2, libjpeg has no fractional upsampling
    "fractional sampling": (
        lambda b: _changed(b, b"\xff\xc0", 14, 0x31),
        "chroma sampling factors that libjpeg does not decode",
    ),
    "unknown marker": (
        lambda b: _changed(b, b"\xff\xe0", 1, 0x8B),
        "a marker that libjpeg does not know",
    ),
    # the scan names component 1 twice (1, 2, 1) and never 3
    "a component twice in the scan": (
        lambda b: _changed(b, b"\xff\xda", 9, 0x01),
        "a scan header that does not fit the frame",
    ),
}


@pytest.mark.parametrize("case", list(_REFUSED))
def test_a_header_that_libjpeg_refuses_is_rejected_without_a_decode(case):
    """Found by seeded damages (48,000): all four passed the check and failed the decode."""
    change, what = _REFUSED[case]
    blobs = _blobs(LANCE[0], "pixels")[:3]
    blobs[1] = change(blobs[1])
    assert not _decodes(blobs[1], (32, 32, 3))  # the oracle: Pillow refuses it
    for shape in ((32, 32, 3), None):  # decoded, or kept as bytes
        with pytest.raises(FormatError, match=rf"col, row 1: the JPEG is damaged .*: {what}"):
            _check(blobs, shape)


def test_every_damage_that_pillow_cannot_decode_is_rejected_or_left_to_a_decode():
    """1,500 seeded damages of recording frames (headers, tables and compressed data)."""
    rng = np.random.default_rng(7)
    originals = _blobs(LANCE[0], "pixels") + _blobs(LANCE[1], "goal")
    undecodable = rejected = 0
    for trial in range(1500):
        blob = originals[trial % len(originals)]
        damaged = _damaged(blob, rng, (0, 0))
        try:
            caught = bool(_check([damaged], (32, 32, 3))[0])  # left to a decode
        except FormatError:
            caught, rejected = True, rejected + 1
        if not _decodes(damaged, (32, 32, 3)):
            undecodable += 1
            assert caught, f"trial {trial}: Pillow fails, the check passes it"
    # the oracle had work to do: damages that Pillow refuses, and more that the check finds
    assert undecodable >= 10, undecodable
    assert rejected >= 100, rejected


def test_a_progressive_jpeg_column_imports_through_the_decode(tmp_path):
    """Scans the structure check does not follow are decoded before writing, exactly."""
    frames = np.random.default_rng(5).integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
    blobs = [_jpeg(f, progressive=True) for f in frames]

    def change(table):
        index = table.schema.get_field_index("pixels")
        return table.set_column(index, "pixels", pa.array(blobs, pa.binary()))

    path = rewrite(LANCE[0], tmp_path, "progressive.lance", change)
    dataset, _ = episodata.import_dataset("lewm", str(path))
    want = np.stack([np.asarray(Image.open(io.BytesIO(b))) for b in blobs[:10]])
    np.testing.assert_array_equal(np.asarray(dataset.episode(0).read().all_obs.pixels), want)
