"""JPEG image columns of swm's Lance datasets: one baseline JPEG per row (formats.md).

Decoding is lossy against the frames the env rendered, so the decoded pixels are what
the file holds, not what the recorder saw. Every blob of a column must decode to the
same ``[H, W, C]`` as its first one; a blob that does not decode is a ``FormatError``
naming the column and the row.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["check_markers", "decode_jpegs", "image_shape", "jpeg_bytes", "verify_jpegs"]

_SOI, _EOI = b"\xff\xd8", b"\xff\xd9"
_CHANNELS = {"L": 1, "RGB": 3}


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


def check_markers(blobs: list[bytes | None], where: str, first_row: int) -> None:
    """Every blob starts with SOI and ends with EOI (a cut-off JPEG lacks the EOI)."""
    for i, blob in enumerate(blobs):
        if blob is None or not blob.startswith(_SOI) or not blob.endswith(_EOI):
            state = "is null" if blob is None else "does not start with FF D8 and end with FF D9"
            raise FormatError(
                f"{where}, row {first_row + i}: the JPEG {state} ({0 if blob is None else len(blob)} "
                "bytes); the dataset is damaged or was cut off"
            )


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
    blobs: list[bytes | None], shape: tuple[int, int, int], where: str, first_row: int
) -> npt.NDArray[np.uint8]:
    """Decode ``len(blobs)`` JPEGs into one ``uint8 [n, H, W, C]`` array.

    Raises
    ------
    FormatError
        A blob is null, does not decode, or decodes to another shape; the message names
        the column (``where``) and the row.
    """
    out = np.empty((len(blobs), *shape), dtype=np.uint8)
    for i, blob in enumerate(blobs):
        image = _decode(blob, shape, f"{where}, row {first_row + i}")
        out[i] = np.asarray(image).reshape(shape)
    return out


def verify_jpegs(
    blobs: list[bytes | None],
    where: str,
    first_row: int,
    shape: tuple[int, int, int] | None = None,
) -> None:
    """Decode every blob and drop the pixels: whether each is a whole JPEG (of ``shape``).

    Raises
    ------
    FormatError
        As :func:`decode_jpegs`; without ``shape``, images of any size pass.
    """
    for i, blob in enumerate(blobs):
        _decode(blob, shape, f"{where}, row {first_row + i}")


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
