"""Frames as pictures without matplotlib: image fields to RGB, and a tiny PNG encoder.

The frame strip is the part of the report people look at first, so it works with
NumPy and the standard library alone.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.schema import FieldSpec

__all__ = ["encode_png", "tile", "to_rgb"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_MIN_SIDE = 48  # tiny frames are enlarged (nearest neighbour) to at least this many pixels


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def encode_png(image: npt.NDArray[np.uint8]) -> bytes:
    """PNG bytes of an ``[H, W, 3]`` uint8 RGB image (8 bits per channel, no filter)."""
    height, width, channels = image.shape
    if channels != 3 or image.dtype != np.uint8:
        raise ValueError(f"encode_png needs [H, W, 3] uint8, got {image.dtype}{list(image.shape)}")
    # each scanline starts with its filter type, 0 (none)
    scanlines = np.concatenate(
        [np.zeros((height, 1), dtype=np.uint8), image.reshape(height, width * 3)], axis=1
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(scanlines.tobytes(), 6))
        + _chunk(b"IEND", b"")
    )


def image_axes(layout: str) -> tuple[int, ...] | None:
    """Axis order that turns ``layout`` into ``H, W[, C]``; ``None`` for other layouts."""
    axes = layout.upper()
    if "H" not in axes or "W" not in axes or set(axes) - set("HWC"):
        return None
    return tuple(axes.index(name) for name in "HWC" if name in axes)


def _bounds(spec: FieldSpec, frame: npt.NDArray[np.float64]) -> tuple[float, float]:
    low, high = spec.low, spec.high
    if isinstance(low, int | float) and isinstance(high, int | float) and high > low:
        return float(low), float(high)
    finite = frame[np.isfinite(frame)]
    if not finite.size:
        return 0.0, 1.0
    return float(finite.min()), float(finite.max())


def to_rgb(frame: npt.NDArray[Any], spec: FieldSpec) -> npt.NDArray[np.uint8] | None:
    """One stored frame as ``[H, W, 3]`` uint8, or ``None`` when its layout is not an image.

    CHW, HWC and HW layouts work. One channel is shown grey, three as RGB, four as RGB
    without alpha; any other count shows the first channel. Non-uint8 frames are scaled
    from the field's ``low``/``high`` bounds, or the frame's own range.
    """
    order = image_axes(spec.layout or "")
    if order is None:
        return None
    image = np.transpose(frame, order)
    if image.ndim == 2:
        image = image[..., None]
    channels = image.shape[-1]
    image = image[..., :3] if channels in (3, 4) else image[..., :1]
    if image.dtype != np.uint8:
        values = image.astype(np.float64)
        low, high = _bounds(spec, values)
        scaled = (np.nan_to_num(values, nan=low) - low) / max(high - low, 1e-12)
        image = np.clip(np.round(scaled * 255.0), 0, 255).astype(np.uint8)
    if image.shape[-1] == 1:
        image = np.repeat(image, 3, axis=-1)
    return np.ascontiguousarray(image)


def tile(frames: list[npt.NDArray[np.uint8]], gap: int = 4) -> npt.NDArray[np.uint8]:
    """Frames side by side, enlarged so that no side is under 48 pixels."""
    height, width = frames[0].shape[:2]
    scale = max(1, -(-_MIN_SIDE // max(1, min(height, width))))
    big = [np.repeat(np.repeat(f, scale, axis=0), scale, axis=1) for f in frames]
    h, w = height * scale, width * scale
    # a slate gap keeps the frame edges visible on light and dark pictures alike
    strip = np.full((h, len(big) * (w + gap) - gap, 3), 150, dtype=np.uint8)
    for i, frame in enumerate(big):
        strip[:, i * (w + gap) : i * (w + gap) + w] = frame
    return strip
