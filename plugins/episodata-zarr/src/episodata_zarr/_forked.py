"""Reads in a ``fork()``ed child, where TensorStore refuses to run.

TensorStore aborts a forked process that touches it (its thread pools do not survive
``fork``), yet PyTorch's ``DataLoader`` forks its workers by default. A worker's reads
therefore go to a helper: a fresh Python process (``python -m episodata_zarr._forked``,
started with :mod:`subprocess`, since daemonic workers may not use multiprocessing)
that opens the dataset read-only with TensorStore and answers over pipes. Messages are
a JSON header plus raw array bytes; nothing is pickled. The helper exits when its pipe
closes, that is, when the worker does.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from typing import IO, TYPE_CHECKING, Any, NoReturn

import numpy as np

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.protocols import EpisodeTable, GatherRequest
from episodata_core.schema import DatasetSchema

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    import numpy.typing as npt

    from episodata_core.protocols import EpisodeRows, Rows
    from episodata_zarr import ZarrBackend
    from episodata_zarr._options import ZarrOptions

__all__ = ["ForkedReader", "RemoteStore", "serve"]

_HEADER = struct.Struct("<Q")


def _send(stream: IO[bytes], header: dict[str, Any], arrays: Mapping[str, Any]) -> None:
    blocks = {key: np.ascontiguousarray(value) for key, value in arrays.items()}
    header = {
        **header,
        "arrays": [[key, block.dtype.str, list(block.shape)] for key, block in blocks.items()],
    }
    text = json.dumps(header).encode()
    stream.write(_HEADER.pack(len(text)))
    stream.write(text)
    for block in blocks.values():
        if block.size:
            stream.write(block.data.cast("B"))
    stream.flush()


def _read_exactly(stream: IO[bytes], target: memoryview) -> None:
    done = 0
    while done < len(target):
        got = stream.readinto(target[done:])  # type: ignore[attr-defined]
        if not got:
            raise EOFError("the pipe closed")
        done += got


def _receive(stream: IO[bytes]) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    size = bytearray(_HEADER.size)
    _read_exactly(stream, memoryview(size))
    text = bytearray(_HEADER.unpack(bytes(size))[0])
    _read_exactly(stream, memoryview(text))
    header: dict[str, Any] = json.loads(text)
    arrays = {}
    for key, dtype, shape in header.pop("arrays"):
        array = np.empty(shape, dtype=np.dtype(dtype))
        if array.size:
            _read_exactly(stream, array.data.cast("B"))
        arrays[key] = array
    return header, arrays


def _table_arrays(table: EpisodeTable) -> dict[str, Any]:
    arrays = {
        "length": table.length,
        "terminated": table.terminated,
        "truncated": table.truncated,
        "ongoing": table.ongoing,
    }
    arrays.update({f"present:{key}": value for key, value in table.present.items()})
    return arrays


def _table(arrays: dict[str, npt.NDArray[Any]]) -> EpisodeTable:
    return EpisodeTable(
        length=arrays["length"],
        terminated=arrays["terminated"],
        truncated=arrays["truncated"],
        ongoing=arrays["ongoing"],
        present={k.removeprefix("present:"): v for k, v in arrays.items() if ":" in k},
    )


class ForkedReader:
    """A helper process that reads one dataset with TensorStore for a forked child."""

    def __init__(self, location: str, options: dict[str, Any]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "episodata_zarr._forked"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        # a URL's storage options travel with it (JSON, like everything here)
        where = getattr(location, "location", None)
        storage = None if where is None else where.options.model_dump(mode="json")
        self.opened, self.table = self.call(
            {"call": "open", "location": location, "options": options, "storage": storage}
        )

    def call(
        self, header: dict[str, Any], arrays: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
        """Send one request; its reply header and arrays."""
        requests, answers = self._process.stdin, self._process.stdout
        assert requests is not None
        assert answers is not None
        try:
            _send(requests, header, arrays or {})
            reply, result = _receive(answers)
        except (OSError, EOFError) as err:
            raise EpisodataError(
                f"the reader process of this fork()ed worker stopped ({err}); its error "
                "output says why"
            ) from err
        if "error" in reply:
            raise EpisodataError(reply["error"])
        return reply, result

    def gather_rows(self, request: GatherRequest) -> Rows:
        """``gather_rows`` in the helper."""
        arrays = {
            "episodes": request.episodes,
            "starts": request.starts,
            "counts": request.counts,
            "offsets": request.offsets,
        }
        header = {"call": "gather", "num_rows": request.num_rows, "fields": list(request.fields)}
        return self.call(header, arrays)[1]

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """``read_rows`` in the helper."""
        header = {"call": "read", "episode": episode, "start": start, "stop": stop}
        return self.call({**header, "fields": list(fields)})[1]

    def close(self) -> None:
        """Stop the helper: it exits when its input closes."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


class RemoteStore:
    """A read-only dataset opened in a forked child: every read goes to a helper."""

    writable = False

    def __init__(self, folder: Path | str, options: ZarrOptions) -> None:
        self.folder = folder
        self.location = folder  # a path, or a Url with its storage options
        self.options = options
        self.pid = os.getpid()
        self.reader = ForkedReader(
            folder if isinstance(folder, str) else str(folder), options.model_dump(mode="json")
        )
        self.schema = DatasetSchema.model_validate(self.reader.opened["schema"])
        self.table = _table(self.reader.table)

    def check(self) -> None:
        """Refuse use from yet another process."""
        if os.getpid() != self.pid:
            raise DatasetStateError(
                f"the Zarr dataset {str(self.folder)!r} was opened in forked process "
                f"{self.pid}; open it again in process {os.getpid()}"
            )

    def episode_table(self) -> EpisodeTable:
        """The index as of the open or the last refresh."""
        return self.table

    def _refuse(self) -> NoReturn:
        raise DatasetStateError(
            f"the Zarr dataset {str(self.folder)!r} was opened read-only in a fork()ed "
            "process; write from the process that created or opened it for writing"
        )

    def start_episode(self, rows: Rows) -> int:
        """Refused: read-only."""
        self._refuse()

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Refused: read-only."""
        self._refuse()

    def append_step(self, episode: int, values: Mapping[str, Any]) -> None:
        """Refused: read-only."""
        self._refuse()

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Refused: read-only."""
        self._refuse()

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Refused: read-only."""
        self._refuse()

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Refused: read-only."""
        self._refuse()

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows of one episode, read by the helper."""
        self.check()
        return self.reader.read_rows(episode, start, stop, fields)

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows, read by the helper."""
        self.check()
        return self.reader.gather_rows(request)

    def flush(self) -> None:
        """Nothing to flush: read-only."""

    def refresh(self) -> None:
        """The helper adopts the newest commit; so does this index."""
        self.check()
        self.table = _table(self.reader.call({"call": "refresh"})[1])

    def verify(self) -> list[str]:
        """``verify`` in the helper."""
        self.check()
        problems: list[str] = self.reader.call({"call": "verify"})[0]["problems"]
        return problems

    def close(self) -> None:
        """Stop the helper."""
        if os.getpid() == self.pid:
            self.reader.close()


def _answer(backend: ZarrBackend, header: dict[str, Any], arrays: dict[str, Any]) -> Any:
    call = header["call"]
    if call == "gather":
        request = GatherRequest(
            episodes=arrays["episodes"],
            starts=arrays["starts"],
            counts=arrays["counts"],
            offsets=arrays["offsets"],
            num_rows=int(header["num_rows"]),
            fields=tuple(header["fields"]),
        )
        return {}, backend.gather_rows(request)
    if call == "read":
        fields = header["fields"]
        return {}, backend.read_rows(header["episode"], header["start"], header["stop"], fields)
    if call == "refresh":
        backend.refresh()
        return {}, _table_arrays(backend.episode_table())
    if call == "verify":
        return {"problems": backend.verify()}, {}
    raise EpisodataError(f"unknown request {call!r}")


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The helper's loop: open the dataset, then answer requests until the pipe closes."""
    from episodata_core.location import normalize
    from episodata_zarr import ZarrBackend, ZarrOptions

    header, _ = _receive(source)
    try:
        where = header["location"]
        if header.get("storage") is not None:
            where = normalize(where, header["storage"])
        backend = ZarrBackend.open(
            where, ZarrOptions.model_validate(header["options"]), writable=False
        )
    except EpisodataError as err:
        _send(sink, {"error": str(err)}, {})
        return
    opened = {"schema": backend.schema.model_dump(mode="json")}
    _send(sink, opened, _table_arrays(backend.episode_table()))
    while True:
        try:
            header, arrays = _receive(source)
        except EOFError:
            break
        try:
            reply, result = _answer(backend, header, arrays)
        except EpisodataError as err:
            _send(sink, {"error": str(err)}, {})
            continue
        _send(sink, reply, result)
    backend.close()


if __name__ == "__main__":
    # answers go through a private copy of stdout; anything else printed goes to stderr
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers)
