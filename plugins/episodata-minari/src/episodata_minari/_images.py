"""JPEG-encoded image observations (minari >= 0.5.3; docs/minari.md, "Images"), via Pillow."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["decode_jpeg_rows", "pad_jpeg_rows"]


def decode_jpeg_rows(values: Any, shape: tuple[int, ...], where: str) -> npt.NDArray[np.uint8]:
    """Decode one JPEG image per row into ``[N, *shape]`` uint8.

    ``values`` is what h5py reads from the stored column: ``[N]`` vlen uint8 (an object
    array of byte arrays) or ``[N, L]`` uint8 whose rows are zero-padded JPEG bytes.
    """
    from PIL import Image

    out = np.empty((len(values), *shape), dtype=np.uint8)
    size = math.prod(shape)
    # one decoder call per image: JPEG has no batched decode in Pillow
    for row, value in enumerate(values):
        data = np.asarray(value, dtype=np.uint8).tobytes()
        try:
            with Image.open(io.BytesIO(data)) as image:
                pixels = np.asarray(image, dtype=np.uint8)
        except (OSError, ValueError) as err:  # UnidentifiedImageError is an OSError
            raise FormatError(
                f"{where}: row {row} is not a decodable JPEG image ({err}); the file is damaged"
            ) from err
        if pixels.shape != shape:
            if pixels.size != size:
                raise FormatError(
                    f"{where}: row {row} decodes to an image of shape {pixels.shape}, but the "
                    f"observation space has shape {shape}"
                )
            pixels = pixels.reshape(shape)  # a grey image of an (H, W, 1) space
        out[row] = pixels
    return out


def pad_jpeg_rows(values: Any, length: int) -> npt.NDArray[np.uint8]:
    """The JPEG bytes of each row, zero-padded to ``[N, length]`` uint8 (``decode_images=False``).

    ``values`` is as in :func:`decode_jpeg_rows`. A JPEG decoder stops at the end-of-image
    marker, so the padding does not change what a row decodes to.
    """
    out = np.zeros((len(values), length), dtype=np.uint8)
    for row, value in enumerate(values):
        data = np.asarray(value, dtype=np.uint8).reshape(-1)
        out[row, : data.size] = data
    return out
