"""Encoders of the LeRobot export: PNG images (Pillow) and mp4 videos (PyAV) (§8.3)."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

    import numpy.typing as npt

__all__ = ["VideoWriter", "encode_png"]

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

    def add(self, frames: npt.NDArray[np.uint8]) -> None:
        """Encode frames ``[N, H, W, C]`` uint8."""
        import av

        fmt = _FORMATS[frames.shape[3]]
        for pixels in frames:
            data = pixels[..., 0] if frames.shape[3] == 1 else pixels
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(data), format=fmt)
            frame.pts = self._frames
            self._frames += 1
            for packet in self._stream.encode(frame):
                self._container.mux(packet)

    def close(self) -> None:
        """Flush the encoder and close the file."""
        try:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
        finally:
            if self._svt_log is None:
                os.environ.pop("SVT_LOG", None)
