"""JPEG-encoded image observations (minari >= 0.5.3; docs/minari.md, "Images").

Which leaves hold JPEG bytes (a uint8 image Box stored with another per-step shape),
decoding them with Pillow (the default) or keeping the bytes zero-padded to a common
length (``decode_images=False``).
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError
from episodata_core.importing import require_module

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_minari._layout import EpisodeEntry, Leaf
    from episodata_minari._source import MinariSource, SpaceLeaf

__all__ = [
    "decode_jpeg_rows",
    "image_paths",
    "jpeg_lengths",
    "jpeg_shape",
    "pad_jpeg_rows",
    "require_pillow",
]

JPEG_START = b"\xff\xd8\xff"
"""Every JPEG file starts with these bytes (SOI marker, then the first segment's marker)."""


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


def image_paths(source: MinariSource) -> set[str]:
    """Observation leaves whose space is a uint8 image Box: they may hold JPEG bytes."""
    return {
        f"observations/{path}" if path else "observations"
        for path, leaf in (source.observation_space or {}).items()
        if leaf.kind == "Box" and leaf.dtype == "uint8" and len(leaf.shape or ()) in (2, 3)
    }


def jpeg_shape(
    space: SpaceLeaf | None, kind: str, row: tuple[int, ...], dtype_text: str, role: str
) -> tuple[int, ...] | None:
    """The image shape of a leaf holding JPEG bytes (§4 Images), else ``None``.

    A uint8 image Box (2 or 3 dims) stored with another per-row shape holds JPEG bytes.
    """
    if role != "observation" or space is None or space.kind != "Box" or space.shape is None:
        return None
    if space.dtype != "uint8" or len(space.shape) not in (2, 3):
        return None
    if kind == "vlen":
        encoded = dtype_text == "vlen uint8" and row == ()
    else:
        # 2-D storage: each row holds the bytes of one image, zero-padded to a common length
        encoded = kind == "array" and dtype_text == "uint8" and len(row) == 1
    return space.shape if encoded else None


def require_pillow(where: str, path: str, dtype_text: str, image: tuple[int, ...]) -> None:
    require_module(
        "PIL.Image",
        feature=(
            f"{where}: {path} holds JPEG-encoded images (stored per step as {dtype_text} "
            f"bytes, observation_space Box{list(image)} uint8; pass decode_images=False to "
            "keep the bytes instead); the importer decodes them"
        ),
        install='pip install "episodata[minari]"',
        distribution="Pillow",
    )


def jpeg_lengths(
    handle: Any, entries: list[EpisodeEntry], leaves: list[Leaf], where: str
) -> dict[str, int]:
    """The row length ``L`` of each kept JPEG leaf: its longest image in any episode.

    Reads the bytes of vlen columns (their lengths are not in the header) and checks that
    every stored image starts as a JPEG does, so damaged bytes are refused before a write.
    """
    lengths: dict[str, int] = {}
    for leaf in leaves:
        if leaf.kind != "jpeg_bytes":
            continue
        length = 1
        for entry in entries:
            column = handle[entry.name][leaf.source]
            rows = list(column[()]) if column.ndim == 1 else list(column[:, : len(JPEG_START)])
            for row, value in enumerate(rows):
                head = np.asarray(value, dtype=np.uint8)[: len(JPEG_START)].tobytes()
                if head != JPEG_START:
                    raise FormatError(
                        f"{where}: {entry.name}/{leaf.source} row {row} does not start like "
                        f"a JPEG image (first bytes {head.hex()}); the file is damaged"
                    )
            width = column.shape[1] if column.ndim == 2 else max(len(v) for v in rows)
            length = max(length, int(width))
        lengths[leaf.source] = length
    return lengths
