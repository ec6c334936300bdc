"""Images out of a LeRobot dataset: PNG bytes in the parquet (Pillow), mp4 frames (PyAV).

A video feature holds every episode of a camera in one mp4 file per chunk; an episode's
frames are those whose ``pts * time_base`` lies in ``[from_timestamp, to_timestamp)``,
compared with half a frame of slack (formats.md §8.1). ``frame.to_ndarray(format=...)``
gives what LeRobot's own PyAV decode gives, level for level.
"""

from __future__ import annotations

import io
import os
import struct
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import numpy.typing as npt

__all__ = [
    "count_video_frames",
    "decode_png_rows",
    "decode_video_into",
    "iter_video_frames",
    "png_size",
    "probe_video",
]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PIX_FMT = {1: "gray", 3: "rgb24", 4: "rgba"}
_PIL_MODE = {1: "L", 3: "RGB", 4: "RGBA"}
_THREADS = min(4, os.cpu_count() or 1)


def png_size(data: bytes) -> tuple[int, int] | None:
    """``(height, width)`` from a PNG's IHDR chunk, or ``None`` when it is not a PNG."""
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(height), int(width)


def binary_values(array: Any) -> tuple[npt.NDArray[np.int64], memoryview]:
    """``(offsets [N + 1], data)`` of an Arrow binary array, without copying its bytes."""
    import pyarrow as pa

    if array.null_count:
        raise ValueError(f"{array.null_count} null value(s)")
    width: type[np.signedinteger[Any]] = (
        np.int64 if pa.types.is_large_binary(array.type) else np.int32
    )
    _, offsets_buffer, data_buffer = array.buffers()[:3]
    offsets = np.frombuffer(offsets_buffer, dtype=width)[
        array.offset : array.offset + len(array) + 1
    ]
    data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
    return offsets.astype(np.int64), data


def _decode_one(data: memoryview, shape: tuple[int, ...], mode: str) -> npt.NDArray[np.uint8]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        # a palette or grey PNG of a declared RGB feature converts to it
        converted = image if image.mode == mode else image.convert(mode)
        pixels = np.asarray(converted, dtype=np.uint8)
    return pixels[..., None] if pixels.ndim == 2 else pixels


def decode_png_rows(
    values: Any,
    shape: tuple[int, ...],
    where: str,
    out: npt.NDArray[np.uint8] | None = None,
    first: int = 0,
) -> npt.NDArray[np.uint8]:
    """Decode one PNG per row of an Arrow binary array into ``[N, H, W, C]`` uint8.

    Pillow releases the GIL while it inflates, so rows are decoded by a few threads; the
    bytes are read in place from the Arrow buffers, the pixels written into ``out`` when
    it is given. Messages count rows from ``first``.
    """
    from concurrent.futures import ThreadPoolExecutor

    offsets, data = binary_values(values)
    count = int(offsets.shape[0]) - 1
    if out is None:
        out = np.empty((count, *shape), dtype=np.uint8)
    target = out
    mode = _PIL_MODE[shape[2]]

    def decode(rows: range) -> None:
        for row in rows:
            try:
                pixels = _decode_one(data[offsets[row] : offsets[row + 1]], shape, mode)
            except (OSError, ValueError, TypeError) as err:  # UnidentifiedImageError: OSError
                raise FormatError(
                    f"{where}: row {first + row} is not a decodable PNG image ({err}); the file is damaged"
                ) from err
            if pixels.shape != shape:
                raise FormatError(
                    f"{where}: row {first + row} decodes to an image of shape {list(pixels.shape)}, but "
                    f"meta/info.json declares {list(shape)}"
                )
            target[row] = pixels

    workers = max(1, min(_THREADS, count // 64))
    if workers == 1:
        decode(range(count))
        return out
    blocks = [range(start, min(start + 64, count)) for start in range(0, count, 64)]
    with ThreadPoolExecutor(workers) as pool:
        for done in pool.map(decode, blocks):
            del done  # map re-raises a block's FormatError here
    return out


def open_video(path: Path, where: str) -> Any:
    """Open an mp4 read-only; a damaged file is a :class:`FormatError`."""
    import av

    try:
        return av.open(str(path))
    except (av.error.FFmpegError, OSError) as err:
        raise FormatError(
            f"{where}: PyAV cannot open {str(path)!r} ({err}); the file is damaged"
        ) from err


def probe_video(path: Path, shape: tuple[int, ...], where: str) -> list[float]:
    """Check the video stream's size against ``shape``; returns every frame's time in seconds.

    Demuxes packets only (no decode), so it is cheap.
    """
    import av

    with open_video(path, where) as container:
        if not container.streams.video:
            raise FormatError(f"{where}: {str(path)!r} holds no video stream")
        stream = container.streams.video[0]
        size = (int(stream.codec_context.height), int(stream.codec_context.width))
        if size != tuple(shape[:2]):
            raise FormatError(
                f"{where}: {str(path)!r} holds {size[0]}x{size[1]} frames but meta/info.json "
                f"declares shape {list(shape)} (height, width, channels)"
            )
        base = stream.time_base or Fraction(1, 1)
        try:
            times = [
                float(packet.pts * base)
                for packet in container.demux(stream)
                if packet.pts is not None and packet.size
            ]
        except av.error.FFmpegError as err:
            raise FormatError(
                f"{where}: {str(path)!r} cannot be read ({err}); the file is damaged"
            ) from err
    return sorted(times)


def count_video_frames(times: list[float], start: float, stop: float, fps: float) -> int:
    """Frames whose time lies in ``[start, stop)``, with half a frame of slack."""
    slack = 0.5 / fps
    array = np.asarray(times)
    return int(((array >= start - slack) & (array < stop - slack)).sum())


def _video_frames(
    container: Any, start: float, stop: float, fps: float, where: str
) -> Iterator[Any]:
    """The decoded ``av.VideoFrame`` objects whose time lies in ``[start, stop)``."""
    import av

    stream = container.streams.video[0]
    base = stream.time_base or Fraction(1, 1)
    slack = 0.5 / fps
    try:
        # seek to the keyframe at or before the window; decoding from there is exact
        container.seek(max(int((start - slack) / base), 0), stream=stream, backward=True)
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            time = float(frame.pts * base)
            if time < start - slack:
                continue
            if time >= stop - slack:
                break
            yield frame
    except av.error.FFmpegError as err:
        raise FormatError(
            f"{where}: decoding failed at {start:.3f} s ({err}); the file is damaged"
        ) from err


def _pixels(frame: Any, fmt: str) -> npt.NDArray[np.uint8]:
    pixels: npt.NDArray[np.uint8] = frame.to_ndarray(format=fmt)
    return pixels[..., None] if pixels.ndim == 2 else pixels


def iter_video_frames(
    container: Any, start: float, stop: float, fps: float, shape: tuple[int, ...], where: str
) -> Iterator[npt.NDArray[np.uint8]]:
    """The frames in ``[start, stop)`` of an open container, ``[H, W, C]`` each, in order."""
    fmt = _PIX_FMT[shape[2]]
    for frame in _video_frames(container, start, stop, fps, where):
        yield _pixels(frame, fmt)


def decode_video_into(
    container: Any, start: float, stop: float, fps: float, out: npt.NDArray[np.uint8],
    where: str,
) -> int:  # fmt: skip
    """Decode the frames in ``[start, stop)`` into ``out`` ``[N, H, W, C]``; returns the count.

    More frames than ``out`` holds is a :class:`FormatError`.
    """
    fmt = _PIX_FMT[out.shape[3]]
    count = 0
    for frame in _video_frames(container, start, stop, fps, where):
        if count == out.shape[0]:
            raise FormatError(f"{where}: more than the {out.shape[0]} frames expected")
        out[count] = _pixels(frame, fmt)
        count += 1
    return count
