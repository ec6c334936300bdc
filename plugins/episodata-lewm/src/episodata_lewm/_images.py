"""JPEG image columns of swm's Lance datasets: one baseline JPEG per row (formats.md).

Decoding is lossy against the frames the env rendered, so the decoded pixels are what
the file holds, not what the recorder saw. Every blob of a column must decode to the
same ``[H, W, C]`` as its first one; a blob that does not decode is a ``FormatError``
naming the column and the row.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["decode_jpegs", "image_shape", "jpeg_bytes", "verify_jpegs"]

_SOI, _EOI = b"\xff\xd8", b"\xff\xd9"
_CHANNELS = {"L": 1, "RGB": 3}
_THREADS = min(4, os.cpu_count() or 1)
_BLOCK = 64  # rows per task: enough to hide the pool's overhead, many tasks per window


def _open(blob: bytes, where: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(blob), formats=["JPEG"])
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise FormatError(f"{where} is not a JPEG image ({err}); the dataset is damaged") from err
    if image.mode not in _CHANNELS and image.mode != "YCbCr":
        raise FormatError(
            f"{where} is a {image.mode} JPEG; only grayscale (L) and RGB images are "
            "decoded. Pass images='jpeg' to keep the encoded bytes"
        )
    return image


def image_shape(blob: bytes, where: str) -> tuple[int, int, int]:
    """``(H, W, C)`` of a JPEG from its header alone."""
    image = _open(blob, where)
    channels = _CHANNELS.get(image.mode, 3)
    return int(image.height), int(image.width), channels


_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_MODES = {1: "L", 3: "RGB"}


def _frame_shape(blob: bytes) -> tuple[int, int, int] | None:
    """``(H, W, C)`` from the JPEG's start-of-frame segment, or None when there is none.

    Walks the marker segments before the scan, a few per file, instead of letting
    Pillow's Python header parser read the tables that the C decoder reads again.
    """
    i, size = 2, len(blob)
    while i + 9 <= size and blob[i] == 0xFF:
        marker = blob[i + 1]
        if marker in _SOF:
            height = int.from_bytes(blob[i + 5 : i + 7], "big")
            width = int.from_bytes(blob[i + 7 : i + 9], "big")
            return height, width, blob[i + 9] if i + 9 < size else 0
        if marker == 0xDA:  # start of scan: no frame header before it
            return None
        i += 2 + int.from_bytes(blob[i + 2 : i + 4], "big")
    return None


def _decode(blob: bytes | None, shape: tuple[int, int, int] | None, row: str) -> Any:
    """One JPEG decoded by Pillow's C decoder (``Image.frombytes``) as ``uint8 [H, W, C]``.

    With ``shape``, the image must have it; without, any size of 1 or 3 channels passes.
    """
    from PIL import Image

    if blob is None:
        raise FormatError(f"{row}: the JPEG is null; every row needs an image")
    if not blob.startswith(_SOI):
        raise FormatError(
            f"{row}: not a JPEG (it does not start with FF D8); the dataset is damaged"
        )
    found = _frame_shape(blob)
    if found is None or found[2] not in _MODES:
        _open(blob, row)  # Pillow names what is wrong with the header
        raise FormatError(f"{row}: the JPEG has no usable frame header; the dataset is damaged")
    if shape is not None and found != shape:
        raise FormatError(
            f"{row}: the JPEG is {found[1]}x{found[0]} with {found[2]} channel(s), but the "
            f"column's first image is {shape[1]}x{shape[0]} with {shape[2]}; every row "
            "of an image column needs one size. Pass images='jpeg' to keep the bytes"
        )
    height, width, channels = found
    mode = _MODES[channels]
    try:
        return Image.frombytes(mode, (width, height), blob, "jpeg", mode, "")
    except (OSError, ValueError, SyntaxError) as err:
        raise FormatError(
            f"{row}: the JPEG does not decode ({err}); the dataset is damaged"
        ) from err


def decode_jpegs(
    offsets: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    shape: tuple[int, int, int],
    where: str,
    first_row: int,
) -> npt.NDArray[np.uint8]:
    """Decode the JPEGs ``data[offsets[i]:offsets[i + 1]]`` into ``uint8 [n, H, W, C]``.

    The caller has checked their structure and size (``_jpegcheck.check_structure``),
    so each goes straight to Pillow's C decoder. Pillow releases the GIL while it
    decodes, so blocks of rows are decoded by a few threads.

    Raises
    ------
    FormatError
        A blob does not decode; the message names the column (``where``) and the row.
    """
    from PIL import Image

    count = offsets.size - 1
    out = np.empty((count, *shape), dtype=np.uint8)
    height, width, channels = shape
    mode = _MODES[channels]
    view = memoryview(data.data)

    def decode(block: range) -> None:
        for row in block:
            blob = view[offsets[row] : offsets[row + 1]]
            try:
                image = Image.frombytes(mode, (width, height), blob, "jpeg", mode, "")
            except (OSError, ValueError, SyntaxError) as err:
                raise FormatError(
                    f"{where}, row {first_row + row}: the JPEG does not decode ({err}); the "
                    "dataset is damaged"
                ) from err
            out[row] = np.asarray(image).reshape(shape)

    _in_threads(decode, count)
    return out


def _in_threads(work: Any, count: int) -> None:
    """``work(block)`` over blocks of ``range(count)``, in a few threads when it pays.

    The first failing block's error (the lowest rows) is raised.
    """
    from concurrent.futures import ThreadPoolExecutor

    blocks = [range(lo, min(lo + _BLOCK, count)) for lo in range(0, count, _BLOCK)]
    if len(blocks) <= 1 or _THREADS == 1:
        for block in blocks:
            work(block)
        return
    with ThreadPoolExecutor(min(_THREADS, len(blocks))) as pool:
        for done in pool.map(work, blocks):
            del done  # map re-raises a block's error here, in block order


def verify_jpegs(
    offsets: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    rows: npt.NDArray[np.int64],
    where: str,
    first_row: int,
    shape: tuple[int, int, int] | None = None,
) -> None:
    """Decode the blobs ``rows`` and drop the pixels: whether each is a whole JPEG (of ``shape``).

    For what :func:`~episodata_lewm._jpegcheck.check_structure` leaves to a decode.

    Raises
    ------
    FormatError
        As :func:`decode_jpegs`; without ``shape``, images of any size pass.
    """
    view = memoryview(data.data)

    def verify(block: range) -> None:
        for i in block:
            row = int(rows[i])
            blob = bytes(view[offsets[row] : offsets[row + 1]])
            _decode(blob, shape, f"{where}, row {first_row + row}")

    _in_threads(verify, rows.size)


def jpeg_bytes(
    blobs: list[bytes | None], width: int, where: str, first_row: int
) -> npt.NDArray[np.bytes_]:
    """The encoded blobs as ``S<width>`` (no JPEG ends in a NUL byte, so none is lost).

    Raises
    ------
    FormatError
        A blob is longer than ``width`` (NumPy would cut it short without a word).
    """
    lengths = [0 if blob is None else len(blob) for blob in blobs]
    longest = max(lengths, default=0)
    if longest > width:
        row = first_row + lengths.index(longest)
        raise FormatError(
            f"{where}, row {row}: a JPEG of {longest} bytes, longer than the {width} bytes the "
            "schema was made for; the dataset changed during the import. Import it again"
        )
    return np.asarray(blobs, dtype=f"S{width}")
