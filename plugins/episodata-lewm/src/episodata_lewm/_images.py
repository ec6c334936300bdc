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

__all__ = ["check_markers", "decode_jpegs", "image_shape", "jpeg_bytes"]

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
        row = f"{where}, row {first_row + i}"
        if blob is None:
            raise FormatError(f"{row}: the JPEG is null; every row needs an image")
        image = _open(blob, row)
        try:
            image.load()  # the whole entropy-coded stream, not just the header
        except (OSError, ValueError, SyntaxError) as err:
            raise FormatError(
                f"{row}: the JPEG does not decode ({err}); the dataset is damaged"
            ) from err
        if image.mode not in _CHANNELS:
            image = image.convert("RGB")
        pixels = np.asarray(image)
        got = pixels.shape if pixels.ndim == 3 else (*pixels.shape, 1)
        if got != shape:
            raise FormatError(
                f"{row}: the JPEG is {got[1]}x{got[0]} with {got[2]} channel(s), but the "
                f"column's first image is {shape[1]}x{shape[0]} with {shape[2]}; every row "
                "of an image column needs one size. Pass images='jpeg' to keep the bytes"
            )
        out[i] = pixels.reshape(shape)
    return out


def jpeg_bytes(blobs: list[bytes | None], width: int) -> npt.NDArray[np.bytes_]:
    """The encoded blobs as ``S<width>`` (no JPEG ends in a NUL byte, so none is lost)."""
    return np.asarray(blobs, dtype=f"S{width}")
