"""The files of a LeRobot export: PNG (Pillow), mp4 (PyAV), parquet, split by size (§8.3).

Frames go into files of about ``data_files_size_in_mb`` / ``video_files_size_in_mb``.
A file holds whole episodes. Before an episode is added to a file that holds some, the
file's bytes plus the episode's estimate (the file's bytes per frame so far times the
episode's frames) are compared with the limit; at or above it the episode starts the
next file: ``file_index + 1``, or ``chunk_index + 1`` and file 0 after ``chunks_size``
files (LeRobot 0.6.1's rule for its data files).
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

    import numpy.typing as npt

__all__ = ["DataFiles", "VideoFiles", "VideoWriter", "encode_png", "next_file"]

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
MIB = 1 << 20

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_FORMATS = {1: "gray", 3: "rgb24", 4: "rgba"}
ENCODERS = {"av1": "libsvtav1", "h264": "libx264"}


def encode_png(frame: npt.NDArray[np.uint8]) -> bytes:
    """One ``[H, W, C]`` uint8 frame as PNG bytes, as LeRobot's image columns hold them."""
    from PIL import Image

    image = Image.fromarray(
        frame[..., 0] if frame.shape[2] == 1 else frame, mode=_MODES[frame.shape[2]]
    )
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


class VideoWriter:
    """Appends ``[N, H, W, C]`` frames to one mp4 stream, one frame per 1/fps seconds."""

    def __init__(self, path: Path, *, codec: str, fps: int, height: int, width: int,
                 crf: int, gop: int, preset: int) -> None:  # fmt: skip
        import av

        # SVT-AV1 prints its whole configuration to stderr when it opens; errors only,
        # unless the caller chose a level. Restored by close()
        self._svt_log = os.environ.get("SVT_LOG")
        if self._svt_log is None:
            os.environ["SVT_LOG"] = "1"
        path.parent.mkdir(parents=True, exist_ok=True)
        opened: Any = av.open(str(path), mode="w", format="mp4")
        self._container = opened
        options = {"crf": str(crf), "g": str(gop)}
        if codec == "av1":
            options["preset"] = str(preset)
        stream: Any = opened.add_stream(ENCODERS[codec], rate=fps, options=options)
        self._stream = stream
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"
        # one thread: the encoders' output bytes then never depend on the machine
        self._stream.codec_context.thread_count = 1
        self._frames = 0
        self.bytes = 0
        """Bytes of the packets muxed so far."""
        self.packets = 0
        """Packets (frames) muxed so far: the encoder holds frames back (its lookahead)."""

    @property
    def frames(self) -> int:
        """Frames added so far."""
        return self._frames

    def add(self, frames: npt.NDArray[np.uint8]) -> None:
        """Encode frames ``[N, H, W, C]`` uint8."""
        import av

        fmt = _FORMATS[frames.shape[3]]
        for pixels in frames:
            data = pixels[..., 0] if frames.shape[3] == 1 else pixels
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(data), format=fmt)
            frame.pts = self._frames
            self._frames += 1
            self._mux(self._stream.encode(frame))

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self.bytes += packet.size
            self.packets += 1
            self._container.mux(packet)

    def close(self) -> None:
        """Flush the encoder and close the file."""
        try:
            self._mux(self._stream.encode(None))
            self._container.close()
        finally:
            if self._svt_log is None:
                os.environ.pop("SVT_LOG", None)


def next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The ``(chunk_index, file_index)`` after ``(chunk, file)``."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def _full(size: int, frames: int, adding: int, limit: float) -> bool:
    return frames > 0 and size + size / frames * adding >= limit


class DataFiles:
    """Episodes' frame tables into ``data/chunk-*/file-*.parquet``, one row group each."""

    def __init__(self, root: Path, limit_mb: float, chunks_size: int) -> None:
        self._root, self._limit, self._chunks = root, limit_mb * MIB, chunks_size
        self._index = (0, 0)
        self._sink: Any = None
        self._writer: Any = None
        self._frames = 0

    def add(self, table: Any) -> tuple[int, int]:
        """Write one episode's ``table``; returns the ``(chunk_index, file_index)`` it went to."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is not None and _full(self._sink.tell(), self._frames, table.num_rows,
                                              self._limit):  # fmt: skip
            self.close()
            self._index = next_file(*self._index, self._chunks)
        if self._writer is None:
            chunk, file = self._index
            path = self._root / DATA_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._sink = pa.OSFile(str(path), "wb")
            self._writer = pq.ParquetWriter(self._sink, table.schema)
            self._frames = 0
        self._writer.write_table(table)
        self._frames += table.num_rows
        return self._index

    def close(self) -> None:
        """Finish the file being written."""
        try:
            if self._writer is not None:
                self._writer.close()
        finally:
            if self._sink is not None:
                self._sink.close()
            self._writer = self._sink = None


class VideoFiles:
    """One video feature's episodes into ``videos/<key>/chunk-*/file-*.mp4``."""

    def __init__(self, root: Path, key: str, limit_mb: float, chunks_size: int,
                 **encoder: Any) -> None:  # fmt: skip
        self._root, self._key, self._limit, self._chunks = root, key, limit_mb * MIB, chunks_size
        self._encoder = encoder
        self._index = (0, 0)
        self._writer: VideoWriter | None = None

    def add(self, frames: npt.NDArray[np.uint8]) -> tuple[int, int, float, float]:
        """Encode one episode's ``[T, H, W, C]`` frames.

        Returns ``(chunk_index, file_index, from_timestamp, to_timestamp)``.
        """
        writer = self._writer
        # the frames the encoder still holds are estimated like the episode's
        if writer is not None and _full(writer.bytes, writer.packets,
                                        writer.frames - writer.packets + len(frames),
                                        self._limit):  # fmt: skip
            self.close()
            self._index = next_file(*self._index, self._chunks)
            writer = None
        if writer is None:
            chunk, file = self._index
            path = self._root / VIDEO_PATH.format(video_key=self._key, chunk_index=chunk,
                                                  file_index=file)  # fmt: skip
            writer = self._writer = VideoWriter(path, **self._encoder)
        fps = self._encoder["fps"]
        start = writer.frames
        writer.add(frames)
        return (*self._index, start / fps, writer.frames / fps)

    def close(self) -> None:
        """Finish the file being written."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
