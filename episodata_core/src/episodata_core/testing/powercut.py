"""Power cuts for tests: run a program, cut it off, and keep only what it had synced.

:func:`run_and_cut` runs a program with a small C library preloaded (``powercut.c``,
compiled here once per process with ``cc``) that sits under everything the program uses
to write files: Python, SQLite, TensorStore all reach the disk through the C library's
``fsync`` family, which the shim wraps. Each successful sync of a file or folder under the
chosen root is recorded (the file's bytes, or the folder's listing); at the cut the
program is SIGKILLed and :func:`build_image` rebuilds, from the tree as it was before the
run and the records in order, the *durable image*: what the disk would hold after a power
loss at that instant. Tests then open the image in place of the original.

The model is the conservative one of CrashMonkey and ALICE:

- a regular file holds its bytes as of its last ``fsync``/``fdatasync`` (or
  ``sync_file_range`` with ``SYNC_FILE_RANGE_WAIT_AFTER``, ``msync`` with ``MS_SYNC``,
  ``syncfs`` of the root's file system or ``sync``: the whole tree) during the run; a file
  never synced during the run holds what it held when the run began, and one created
  during the run and never synced is empty;
- a folder holds the entries (name -> file) it had at its last sync during the run, or
  when the run began; one created during the run and never synced is empty. So
  ``write tmp; fsync tmp; rename tmp -> x`` without an fsync of the folder leaves the
  *old* ``x``: a rename, a new file or an unlink is durable only once its folder is synced.

``namespace="journaled"`` relaxes the second rule to what file systems that journal their
metadata in order do (ext4 with ``data=ordered``, XFS): a sync of anything commits every
namespace change made before it (new names, renames, unlinks, new folders, in every
folder), while a file's bytes still count only from its own syncs. A backend that passes
only there relies on that journal, not on POSIX.

Its limits, each on the strict side unless said otherwise:

- no part of the unsynced writes is ever kept: a real disk may keep any subset of them
  (whole pages, in any order), so the image is one of the possible outcomes, the
  "everything unsynced is lost" one, not all of them; torn pages are not simulated;
- writes through ``O_SYNC``/``O_DSYNC`` descriptors count as unsynced (stricter than
  reality: nothing we test relies on them);
- ``sync_file_range`` with ``WAIT_AFTER`` counts as a sync of the whole file, metadata
  included (laxer than reality, where it syncs neither the size nor the disk's cache);
- file systems that journal metadata (ext4) in fact make a new file's entry durable with
  the file's fsync; the model does not (stricter);
- a file is known by device, inode and birth time, so a reused inode number is another
  file; where the file system records no birth time, by device and inode only;
- hard links are materialized as copies; a folder renamed without syncing both parents
  may show up twice, at its first place only (a real journal moves it atomically);
- SQLite's ``-shm`` files are never synced (the image holds them empty or as they were):
  SQLite rebuilds them from the WAL at the first open, so their content does not matter;
- only the C library's entry points are seen: a program that makes the ``fsync``
  system call directly (not through the C library) would have its syncs ignored.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["PowerCut", "SyncRecord", "build_image", "read_records", "run_and_cut", "shim"]

SOURCE = Path(__file__).with_name("powercut.c")
_HEADER_FIELDS = 5  # kind, device, inode, birth time, path

Identity = tuple[str, str, str]
"""A file: device (``major:minor``), inode, birth time (``sec.nsec`` or ``0``)."""


@functools.cache
def shim() -> Path:
    """The compiled shim (``powercut.so``), built once per process in a temporary folder.

    Raises
    ------
    RuntimeError
        Not on Linux (``LD_PRELOAD`` is how it attaches), no ``cc``, or the build failed.
    """
    if sys.platform != "linux":
        raise RuntimeError(f"power cuts need Linux (LD_PRELOAD); this is {sys.platform}")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError(
            "power cuts need a C compiler to build powercut.c: neither 'cc' nor 'gcc' is on "
            "PATH; install one (Debian/Ubuntu: apt-get install gcc)"
        )
    folder = Path(tempfile.mkdtemp(prefix="episodata-powercut-"))
    atexit.register(shutil.rmtree, folder, True)
    library = folder / "powercut.so"
    command = [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE)]
    built = subprocess.run(
        [*command, "-ldl", "-pthread"], check=False, capture_output=True, text=True
    )
    if built.returncode != 0:
        raise RuntimeError(f"building {SOURCE.name} failed: {' '.join(command)}\n{built.stderr}")
    return library


_SNAPSHOTS = threading.Lock()  # the library keeps the root and shadow of a call in globals


def _snapshot(root: Path, shadow: Path) -> None:
    """Record the whole tree at ``root`` into ``shadow``: the state before the run."""
    library = ctypes.CDLL(str(shim()))
    library.powercut_snapshot.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    library.powercut_snapshot.restype = ctypes.c_int
    with _SNAPSHOTS:
        failed = library.powercut_snapshot(os.fsencode(root), os.fsencode(shadow)) != 0
    if failed:
        raise RuntimeError(f"recording the tree at {root} before the run failed: {_error(shadow)}")


def _error(shadow: Path) -> str:
    path = shadow / "ERROR"
    return path.read_text(errors="replace").strip() if path.exists() else "no details"


@dataclass(frozen=True)
class SyncRecord:
    """One record of the shim: a synced file's bytes or a synced folder's listing.

    ``seq`` counts from 1 over the whole run, the records of the state before the run
    first. The file's bytes start at ``offset`` in ``source``.
    """

    seq: int
    kind: str  # "file" or "folder"
    identity: Identity
    path: str
    source: Path
    offset: int


def read_records(shadow: str | os.PathLike[str]) -> list[SyncRecord]:
    """The complete records in ``shadow``, in order (a record a kill cut short is skipped)."""
    records = []
    for source in sorted(Path(shadow).glob("*.rec")):
        with source.open("rb") as handle:
            head = handle.read(3 * os.pathconf(source, "PC_PATH_MAX"))
        fields = head.split(b"\0", _HEADER_FIELDS)
        kind, device, inode, born = (f.decode() for f in fields[: _HEADER_FIELDS - 1])
        path = fields[_HEADER_FIELDS - 1]
        offset = len(head) - len(fields[_HEADER_FIELDS])
        records.append(
            SyncRecord(
                seq=int(source.stem),
                kind={"F": "file", "D": "folder"}[kind],
                identity=(device, inode, born),
                path=os.fsdecode(path),
                source=source,
                offset=offset,
            )
        )
    return records


Entry = tuple[str, Identity, str]  # type ("d", "f", "l"), identity, symlink target


def _listing(record: SyncRecord) -> dict[str, Entry]:
    fields = record.source.read_bytes()[record.offset :].split(b"\0")
    entries: dict[str, Entry] = {}
    for at in range(0, len(fields) - 6, 6):
        kind, device, inode, born, name, target = (os.fsdecode(f) for f in fields[at : at + 6])
        entries[name] = (kind, (device, inode, born), target)
    return entries


def build_image(shadow: str | os.PathLike[str], image: str | os.PathLike[str]) -> set[Identity]:
    """Materialize the durable tree that the records in ``shadow`` describe at ``image``.

    The first record is the root folder as it was before the run; later records replace
    a file's bytes or a folder's entries, in order. ``image`` must not exist. Returns
    the identities of the files and folders the image holds.
    """
    records = read_records(shadow)
    if not records or records[0].kind != "folder":
        raise RuntimeError(f"{shadow} holds no record of the tree before the run")
    files: dict[Identity, SyncRecord] = {}
    folders: dict[Identity, SyncRecord] = {}
    for record in records:
        (files if record.kind == "file" else folders)[record.identity] = record
    placed: set[Identity] = set()

    def materialize(folder: Identity, at: Path) -> None:
        placed.add(folder)
        at.mkdir()
        if folder not in folders:
            return  # created during the run and never synced: empty
        for name, (kind, identity, target) in sorted(_listing(folders[folder]).items()):
            if kind == "d" and identity not in placed:
                materialize(identity, at / name)
            elif kind == "l":
                os.symlink(target, at / name)
            elif kind == "f":
                placed.add(identity)
                _write_content(files.get(identity), at / name)

    materialize(records[0].identity, Path(image))
    return placed


def _write_content(record: SyncRecord | None, target: Path) -> None:
    with target.open("wb") as out:
        if record is None:
            return  # created during the run and never synced: empty
        with record.source.open("rb") as source:
            source.seek(record.offset)
            shutil.copyfileobj(source, out, 1 << 20)


@dataclass(frozen=True)
class PowerCut:
    """What :func:`run_and_cut` saw.

    ``lines`` are the program's standard output lines (without the newline), every one
    written before the cut; ``ages`` says for each how many seconds at least it was
    written before the cut (it was read that long before). ``returncode`` is ``None`` when the cut killed the program,
    else its exit status (it ended before the cut: the cut came after its exit).
    ``records`` are the syncs made during the run, in order (their ``source`` is gone).
    ``unnamed`` lists the files (relative to the root) that the program had synced and
    could see at the cut, but that the image lacks: a folder on their path was not synced
    after the name was made; the usual reason a backend fails here.
    """

    image: Path
    lines: list[str]
    ages: list[float]
    returncode: int | None
    stderr: str
    records: list[SyncRecord]
    unnamed: list[str]


def _unnamed(root: Path, records: list[SyncRecord], placed: set[Identity]) -> list[str]:
    """Files synced during the run, under ``root`` at the cut, absent from the image."""
    # the program's tree knows inodes, not birth times: compare by device and inode
    kept = {identity[:2] for identity in placed}
    synced = {r.identity[:2] for r in records if r.kind == "file"} - kept
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            with contextlib.suppress(OSError):
                st = path.lstat()
                if (f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", str(st.st_ino)) in synced:
                    found.append(str(path.relative_to(root)))
    return sorted(found)


def run_and_cut(
    argv: Sequence[str],
    root: str | os.PathLike[str],
    image: str | os.PathLike[str],
    *,
    cut: Callable[[str], float | None] | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes = b"",
    namespace: Literal["synced", "journaled"] = "synced",
    timeout: float = 120.0,
) -> PowerCut:
    """Run ``argv`` under the shim, cut the power, and build the durable image of ``root``.

    Parameters
    ----------
    argv
        The program; it inherits this environment plus ``env``.
    root
        The folder whose syncs count (the dataset); it must exist. It is left as the
        program left it: the image is a new folder.
    image
        Where the durable image goes; must not exist.
    cut
        Called with each line the program prints; when it returns a number, the power is
        cut that many seconds later (SIGKILL, lines printed meanwhile still count). With
        ``None`` (or when the program exits first) the cut comes after the program exits.
    input
        The program's standard input.
    namespace
        ``"synced"``: a folder's entries are durable at its own syncs; ``"journaled"``: at
        every sync (see the module's docstring).
    timeout
        Seconds before a program that was never cut is killed and this raises.

    Raises
    ------
    TimeoutError
        The program neither exited nor was cut within ``timeout`` seconds.
    RuntimeError
        The shim could not record a sync (its message says which and why).
    """
    root = Path(root).resolve(strict=True)
    library = shim()
    work = Path(tempfile.mkdtemp(prefix="powercut-run-"))
    try:
        shadow = work / "shadow"
        shadow.mkdir()
        _snapshot(root, shadow)
        before = len(list(shadow.glob("*.rec")))
        preload = " ".join(filter(None, [str(library), os.environ.get("LD_PRELOAD")]))
        environment = {
            **os.environ,
            **(env or {}),
            "LD_PRELOAD": preload,
            "POWERCUT_ROOT": str(root),
            "POWERCUT_SHADOW": str(shadow),
            "POWERCUT_NAMESPACE": namespace,
        }
        (work / "stdin").write_bytes(input)
        with (work / "stderr").open("w+b") as stderr, (work / "stdin").open("rb") as stdin:
            lines, ages, returncode = _run(list(argv), environment, stdin, stderr, cut, timeout)
            stderr.seek(0)
            errors = stderr.read().decode(errors="replace")
        if (shadow / "ERROR").exists():
            raise RuntimeError(f"the shim failed to record a sync: {_error(shadow)}")
        placed = build_image(shadow, image)
        records = read_records(shadow)[before:]
        unnamed = _unnamed(root, records, placed)
        # the records' bytes are read by the image only; the list keeps their names
        return PowerCut(Path(image), lines, ages, returncode, errors, records, unnamed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(
    argv: list[str],
    environment: dict[str, str],
    stdin: BinaryIO,
    stderr: BinaryIO,
    cut: Callable[[str], float | None] | None,
    timeout: float,
) -> tuple[list[str], list[float], int | None]:
    """Run until ``cut`` says so (then SIGKILL) or the program exits.

    Returns its lines, how long before the cut each was read, and its exit status.
    """
    process = subprocess.Popen(
        argv,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=environment,
    )
    assert process.stdout is not None
    received: queue.Queue[tuple[float, bytes] | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            received.put((time.monotonic(), line))
        received.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    lines: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout
    delay: float | None = None
    ended = False
    try:
        while delay is None:
            try:
                item = received.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"{argv} was neither cut nor done after {timeout} s") from None
            if item is None:
                ended = True
                break
            lines.append((item[0], item[1].decode(errors="replace").rstrip("\n")))
            delay = cut(lines[-1][1]) if cut is not None else None
        if delay is not None:
            time.sleep(delay)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        returncode = process.wait()
        cut_at = time.monotonic()
        reader.join()
    while not ended:
        rest = received.get()
        if rest is None:
            break
        lines.append((rest[0], rest[1].decode(errors="replace").rstrip("\n")))
    with contextlib.suppress(ValueError):
        process.stdout.close()
    # a line read after the kill was written before it: at least 0 s before the cut
    ages = [max(0.0, cut_at - at) for at, _ in lines]
    status = None if returncode == -signal.SIGKILL and not ended else returncode
    return [text for _, text in lines], ages, status
