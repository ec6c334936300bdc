"""Power-loss chains: the kill chain's writer, cut off by a simulated power loss.

:func:`check_power_loss` creates a dataset, then, cut after cut, runs the kill chain's
writer (``_crash_writer.py``: it appends episodes whole, in batches and step by step, and
calls ``flush()`` now and then) under the power-cut layer (:mod:`powercut`), cuts the power
a random delay after the writer reported its ``k``-th returned ``flush()``, and takes the
*durable image*, what a disk keeps of the dataset after a power loss at that instant. A
copy of the image is opened read-only, then writable (the recovery), and checked against
what the writer reported, every expected row rebuilt from the episode ids:

- every episode finalized before the last ``flush()`` that returned is there, finalized,
  with its flags, bit-identical, every field; so is every episode a previous cut's image
  held (it was on the disk), and, given a ``sync_interval``, every episode finalized at
  least that long (plus a slack) before the cut; every ongoing episode holds at least the
  rows that flush (or a previous image) held;
- every other visible episode is whole and finalized or an ongoing exact prefix, never
  torn, and an episode written whole is never ongoing;
- ``verify()`` is clean after the recovering open, and the dataset accepts a new episode
  that reads back identical;
- with ``expect_recovery_report``, the recovering open logs an INFO record on the
  ``"episodata"`` logger whose message contains ``recovered``.

The next writer of the chain then runs on the image itself (not the checked copy), so its
own recovery happens under the layer too: a cut after a cut. The model of the layer and
its limits are in :mod:`episodata_core.testing.powercut`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from episodata_core.dataset import Dataset
from episodata_core.testing import _crash_writer
from episodata_core.testing._crash_checks import Reported, check_dataset
from episodata_core.testing._crash_writer import bulk_episode
from episodata_core.testing.crash import KillChainFigures
from episodata_core.testing.powercut import run_and_cut

if TYPE_CHECKING:
    from collections.abc import Iterator

    from episodata_core.schema import DatasetSchema

__all__ = ["PowerLossFigures", "check_power_loss"]

RECOVERY_LOGGER = "episodata"
_SHOWN_PROBLEMS = 8
_NEW_VARIANT = 1 << 21  # the variant of the episode the check appends: no writer round's


@dataclasses.dataclass
class PowerLossFigures:
    """What one power-loss chain did and found."""

    backend: str
    seed: int
    cuts: int = 0
    episodes: int = 0  # in the last image
    durable: int = 0  # episodes the last image had to keep
    dropped: int = 0  # episodes finalized after a cut's last flush that the image lost
    syncs: int = 0  # sync records the writers made
    episodes_checked: int = 0
    failure: str | None = None

    def summary(self) -> str:
        """One line for the test log."""
        return (
            f"power-loss chain {self.backend} seed={self.seed}: {self.cuts} cuts, "
            f"{self.episodes} episodes in the last image ({self.durable} had to be there, "
            f"{self.dropped} unsynced ones dropped over the chain), {self.syncs} syncs, "
            f"{self.episodes_checked} episode checks"
            + (f"; FAILED {self.failure}" if self.failure else "")
        )


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Where the cuts of a chain land and what the image is held to."""

    flushes: int  # the most returned flushes before a cut
    max_delay: float  # the longest delay after the last of them
    namespace: Literal["synced", "journaled"]
    sync_interval: float | None
    interval_slack: float


@dataclasses.dataclass
class _Expected:
    """What the images must hold, from the writers' lines and the images before."""

    final: set[int] = dataclasses.field(default_factory=set)
    flushed: dict[int, int] = dataclasses.field(default_factory=dict)  # episode -> rows
    whole: set[int] = dataclasses.field(default_factory=set)
    variant: dict[int, int] = dataclasses.field(default_factory=dict)
    offset: int = 0  # in the writers' report

    def take(self, log: Path, ages: list[float] | None = None, older: float = 0.0) -> set[int]:
        """Take in the report lines of the writer just cut; what it finalized unsynced.

        The report, not the standard output: a cut between the two writes of a line
        leaves it in the report only, and the next writer reads its variants from there.
        ``ages``: how long before the cut each line was written, at least; with them, an
        episode finalized ``older`` seconds or more before the cut is durable too.
        """
        data = log.read_bytes() if log.exists() else b""
        end = data.rfind(b"\n", self.offset) + 1
        lines, self.offset = data[self.offset : end].decode().splitlines(), max(self.offset, end)
        finalized: set[int] = set()
        for at, line in enumerate(lines):
            word, *args = line.split() or [""]
            if word in ("add", "start"):
                episode, variant = int(args[0]), int(args[1])
                self.variant[episode] = variant
                (self.whole.add if word == "add" else self.whole.discard)(episode)
            elif word == "batch":
                first, count, variant = map(int, args)
                self.whole.update(range(first, first + count))
                self.variant.update(dict.fromkeys(range(first, first + count), variant))
            elif word == "final" and ages is not None and at < len(ages) and ages[at] >= older:
                self.final.update(map(int, args))  # the sync interval has passed since
            elif word == "final":
                finalized.update(map(int, args))
            elif word == "flushed":  # a sync point: everything before it is durable
                self.final |= finalized
                finalized = set()
                for pair in args:
                    episode, rows = map(int, pair.split(":"))
                    self.flushed[episode] = max(rows, self.flushed.get(episode, 0))
        return finalized - self.final

    def reported(self) -> Reported:
        """The kill chain's oracle, told that only the durable episodes were reported."""
        return Reported(
            final=set(self.final),
            flushed=dict(self.flushed),
            whole=set(self.whole),
            variant=dict(self.variant),
        )


def check_power_loss(
    backend: str,
    location: str,
    schema: DatasetSchema,
    *,
    seed: int,
    cuts: int = 3,
    flushes: int = 3,
    max_delay: float = 0.05,
    expect_recovery_report: bool = False,
    namespace: Literal["synced", "journaled"] = "synced",
    sync_interval: float | None = None,
    interval_slack: float = 0.5,
    **options: Any,
) -> PowerLossFigures:
    """Run one power-loss chain of ``cuts`` cuts on a new dataset at ``location``.

    Parameters
    ----------
    backend
        The backend's registered name; it must support ``flush()``.
    location
        A folder that does not exist yet; the images (``<location>-cut<N>``) and the
        writers' report (``<location>-power.log``) go next to it.
    seed
        Seeds each cut's place and every writer's choice of operations.
    flushes
        Each cut comes after a random number (1 to ``flushes``) of returned flushes...
    max_delay
        ...and a random delay of up to this many seconds after it.
    expect_recovery_report
        Require the recovering open of each image to log an INFO record containing
        ``recovered`` on the ``"episodata"`` logger.
    namespace
        ``"synced"`` (POSIX: a new name is durable once its folder is synced) or
        ``"journaled"`` (ext4, XFS: once anything is synced); see :func:`run_and_cut`.
    sync_interval
        The backend's promise that a finalized episode is power-durable at most this many
        seconds after its call returned: episodes finalized ``sync_interval +
        interval_slack`` seconds or more before the cut must survive it too (a large
        ``max_delay`` makes such cuts common). ``None``: only flushes are sync points.
    options
        Backend options for ``Dataset.create``.

    Raises
    ------
    AssertionError
        A cut lost or tore an episode, an image did not open or verify, or refused a new
        episode; the message holds :meth:`PowerLossFigures.summary` and the problems.
    """
    figures = PowerLossFigures(backend=backend, seed=seed)
    Dataset.create(schema, location, backend=backend, **options).close()
    log = Path(f"{location}-power.log")
    rng = np.random.default_rng(seed)
    expected = _Expected()
    root = Path(location)
    for cut in range(cuts):
        image = Path(f"{location}-cut{cut}")
        figures.failure = _one_cut(
            root,
            image,
            log,
            schema,
            expected,
            figures,
            rng,
            _Plan(flushes, max_delay, namespace, sync_interval, interval_slack),
            expect_recovery_report,
        )
        if figures.failure is not None:
            figures.failure = f"at cut {cut + 1}: {figures.failure}"
            break
        if root != Path(location):
            shutil.rmtree(root)  # the image the writer just ran on: the new one replaces it
        root = image
    assert figures.failure is None, figures.summary()
    return figures


def _one_cut(
    root: Path,
    image: Path,
    log: Path,
    schema: DatasetSchema,
    expected: _Expected,
    figures: PowerLossFigures,
    rng: np.random.Generator,
    plan: _Plan,
    expect_recovery_report: bool,
) -> str | None:
    """Run a writer on ``root``, cut it, check the image; a failure or None."""
    aim, delay = int(rng.integers(1, plan.flushes + 1)), float(rng.uniform(0, plan.max_delay))
    seen = 0

    def after_flushes(line: str) -> float | None:
        nonlocal seen
        seen += line.startswith("flushed")
        return delay if seen >= aim else None

    command = [sys.executable, "-P", _crash_writer.__file__, str(root), str(log)]
    result = run_and_cut(
        [*command, str(int(rng.integers(1 << 30))), str(figures.cuts)],
        root,
        image,
        cut=after_flushes,
        input=b"go\n",
        namespace=plan.namespace,
    )
    if result.returncode is not None:
        tail = " | ".join(result.stderr.strip().splitlines()[-6:])
        return f"the writer exited with code {result.returncode} before the cut: {tail}"
    figures.cuts += 1
    figures.syncs += len(result.records)
    # the report has the standard output's lines but "ready", in the same order
    ages = [age for line, age in zip(result.lines, result.ages, strict=True) if line != "ready"]
    if plan.sync_interval is None:
        unsynced = expected.take(log)
    else:
        unsynced = expected.take(log, ages, older=plan.sync_interval + plan.interval_slack)
    checked = Path(f"{image}-check")
    shutil.copytree(image, checked, symlinks=True)
    try:
        failure, visible = _check_image(checked, schema, expected, figures, expect_recovery_report)
    finally:
        shutil.rmtree(checked, ignore_errors=True)
    if failure is not None:
        unnamed = (
            f"; {len(result.unnamed)} files synced and in the dataset at the cut are not in "
            f"the image (a folder on their path was never synced): {result.unnamed[:6]}"
            if result.unnamed
            else ""
        )
        return f"(cut {delay * 1e3:.0f} ms after flush {aim}) {failure}{unnamed}"
    figures.dropped += len(unsynced - visible)
    figures.durable = len(expected.final)
    return None


def _check_image(
    folder: Path,
    schema: DatasetSchema,
    expected: _Expected,
    figures: PowerLossFigures,
    expect_recovery_report: bool,
) -> tuple[str | None, set[int]]:
    """Open ``folder`` read-only, then writable; check, verify, append; failure, finalized."""
    counts = KillChainFigures(backend=figures.backend, seed=figures.seed)
    reported = expected.reported()
    finalized: set[int] = set()
    ongoing: dict[int, int] = {}
    for writable in (False, True):
        what = "the recovering open" if writable else "a read-only open"
        try:
            with _captured(RECOVERY_LOGGER) as records:
                dataset = Dataset.open(str(folder), read_only=not writable)
                if writable:
                    dataset._prepare_write()
        except Exception as error:  # noqa: BLE001 (any failure to open is a finding)
            return f"{what} of the image failed: {type(error).__name__}: {error}", set()
        try:
            problems = check_dataset(dataset, schema, reported, counts, all_or_none=False)
            if writable and not problems:
                problems = _after_recovery(
                    dataset, records, expect_recovery_report=expect_recovery_report
                )
            if writable and not problems:
                table = dataset.backend.episode_table()
                finalized = {int(e) for e in np.flatnonzero(~table.ongoing)}
                ongoing = {int(e): int(table.length[e]) + 1 for e in np.flatnonzero(table.ongoing)}
                new = len(table)
                reported.whole.add(new)
                reported.final.add(new)
                reported.variant[new] = _NEW_VARIANT
                dataset.add_episode(bulk_episode(schema, reported.content(schema, new)))
        except Exception as error:  # noqa: BLE001 (a check or an append that raises is a finding)
            problems = [f"{type(error).__name__}: {error}"]
        finally:
            dataset.close()
        if problems:
            figures.episodes_checked += counts.episodes_checked
            return f"{what}: " + "; ".join(problems[:_SHOWN_PROBLEMS]), set()
    # the appended episode reads back, in a fresh read-only open
    try:
        dataset = Dataset.open(str(folder), read_only=True)
        try:
            problems = check_dataset(dataset, schema, reported, counts, all_or_none=False)
        finally:
            dataset.close()
    except Exception as error:  # noqa: BLE001
        problems = [f"{type(error).__name__}: {error}"]
    figures.episodes_checked += counts.episodes_checked
    if problems:
        return "after appending an episode: " + "; ".join(problems[:_SHOWN_PROBLEMS]), set()
    # what this image holds was on the disk: every later image must hold it too
    figures.episodes = len(finalized) + len(ongoing)
    expected.final |= finalized
    for episode, rows in ongoing.items():
        expected.flushed[episode] = max(rows, expected.flushed.get(episode, 0))
    return None, finalized


def _after_recovery(
    dataset: Dataset, records: list[logging.LogRecord], *, expect_recovery_report: bool
) -> list[str]:
    """The checks of a writable open: the recovery report and ``verify()``."""
    problems = []
    if expect_recovery_report and not any(
        r.levelno == logging.INFO and "recovered" in r.getMessage() for r in records
    ):
        logged = [f"{r.levelname}: {r.getMessage()}" for r in records]
        problems.append(
            f"the recovery logged no INFO record containing 'recovered' on the "
            f"{RECOVERY_LOGGER!r} logger; it logged {logged}"
        )
    verify = getattr(dataset.backend, "verify", None)
    damaged = verify() if verify is not None else []
    if damaged:
        problems.append(f"verify() after recovery: {damaged[:_SHOWN_PROBLEMS]}")
    return problems


@contextlib.contextmanager
def _captured(name: str) -> Iterator[list[logging.LogRecord]]:
    """The records that logger ``name`` (and its children) emit at INFO or above."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger, handler = logging.getLogger(name), Keep(logging.INFO)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
