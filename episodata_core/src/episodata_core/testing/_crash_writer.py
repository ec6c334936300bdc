"""The writer of the kill chains: a program the chain runs and SIGKILLs, and its oracle.

The chain (``crash.py``) runs this file by path (``python -P _crash_writer.py ...``), so
the writer imports neither pytest nor the rest of the kit and starts quickly. It reopens
the dataset, resumes some of the ongoing episodes it finds, and appends episodes through
the public API (``add_episode``, ``add_episodes``, step writers with ``flush()`` while
they are ongoing) until it is killed. The rows and flags of an episode follow from its id
and its variant, the round that began it (:func:`chain_episode`), so the parent rebuilds
every expected value on its own. An id whose write a kill cut off is written again by
the next round with other rows, usually of another size: leftovers of the killed write
that the next one trusts then show as damage.

After every call that returns a durability guarantee the writer appends one line to the
report file, saying what is now durable; before a write it notes what it is about to do:

``open N``
    the writable open (and its recovery) is done; the dataset holds ``N`` episodes.
    Before it opens, the writer prints ``ready`` on its standard output once it has
    imported what it needs, and waits for a line on its standard input (so that the
    chain can start it while the previous one still runs).
``add ID V`` / ``batch FIRST COUNT V`` / ``start ID V`` / ``step ID ROWS`` / ``flush``
    about to write episode ``ID`` (variant ``V``) whole, episodes ``FIRST..FIRST+COUNT-1``
    in one ``add_episodes`` call, to start episode ``ID`` step by step, to append its
    steps up to row ``ROWS`` (finalizing it at its end), or to flush: intents, no
    guarantee.
``final ID [ID ...]``
    these episodes are finalized and crash-durable (the call returned).
``flushed ID:ROWS ...``
    ``flush()`` returned: each ongoing episode ``ID`` has its first ``ROWS`` rows durable.

Each line is one ``write`` to a file opened with ``O_APPEND``: a kill never tears it, and
the page cache keeps it when the process dies. The writer echoes every line on its
standard output, where the chain counts them to place its kill in the writer's work.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_core.writers import EpisodeWriter

LENGTHS = (1, 2, 4, 9, 24, 60, 150)
"""Rows of chain episodes (reset row included): very different sizes of writes."""

_CONTENT_SEED = 0xC4A1
_MAX_ONGOING = 3
_LIFETIME_S = 120.0  # a writer whose parent died stops on its own


@dataclass(frozen=True)
class ChainEpisode:
    """The expected content of one chain episode: storage rows ``[L + 1, ...]`` and flags."""

    rows: dict[str, npt.NDArray[Any]]
    terminated: bool
    truncated: bool

    @property
    def num_rows(self) -> int:
        """Rows of the finished episode, reset row included."""
        return len(next(iter(self.rows.values())))


def chain_episode(schema: DatasetSchema, episode: int, variant: int = 0) -> ChainEpisode:
    """The rows and flags of chain episode ``episode`` as round ``variant`` writes it.

    Lengths are one of :data:`LENGTHS`; optional observation and info fields are absent
    from about a third of the episodes; row 0 of actions and rewards is zero, as step
    writers store it.
    """
    rng = np.random.default_rng([_CONTENT_SEED, episode, variant])
    num_rows = int(rng.choice(LENGTHS))
    rows: dict[str, npt.NDArray[Any]] = {}
    for spec in schema:
        # step writers always hold optional action and reward fields, so only these vary
        if spec.optional and spec.role in ("observation", "info") and rng.random() < 0.3:
            continue
        shape = (num_rows, *spec.shape)
        if spec.np_dtype.kind == "b":
            values = rng.integers(0, 2, size=shape).astype(bool)
        elif spec.np_dtype.kind in "iu":
            values = rng.integers(0, 100, size=shape).astype(spec.np_dtype)
        else:
            values = rng.normal(size=shape).astype(spec.np_dtype)
        if spec.role in ("action", "reward"):
            values[:1] = 0
        rows[spec.qualified_key] = values
    flags = int(rng.integers(0, 4))
    return ChainEpisode(rows, terminated=bool(flags & 1), truncated=bool(flags & 2))


def _by_role(
    schema: DatasetSchema, rows: dict[str, npt.NDArray[Any]], at: slice | int
) -> dict[str, dict[str, Any]]:
    """``rows[at]`` of every present field, as ``{role: {key: value}}``."""
    out: dict[str, dict[str, Any]] = {"observation": {}, "action": {}, "reward": {}, "info": {}}
    for spec in schema:
        if spec.qualified_key in rows:
            out[spec.role][spec.key] = rows[spec.qualified_key][at]
    return out


def bulk_episode(schema: DatasetSchema, content: ChainEpisode) -> dict[str, Any]:
    """The action-in bulk dict (``Dataset.add_episode``) whose storage rows are ``content``."""
    first, rest = _by_role(schema, content.rows, 0), _by_role(schema, content.rows, slice(1, None))
    episode: dict[str, Any] = {
        "initial_observation": first["observation"],
        "observations": rest["observation"],
        "actions": rest["action"],
        "rewards": rest["reward"],
        "terminated": content.terminated,
        "truncated": content.truncated,
    }
    if first["info"]:
        episode["initial_info"], episode["infos"] = first["info"], rest["info"]
    return episode


def start_episode(dataset: Dataset, content: ChainEpisode) -> EpisodeWriter:
    """Begin ``content`` step by step at its reset row."""
    reset = _by_role(dataset.schema, content.rows, 0)
    return dataset.new_episode(reset["observation"], reset["info"] or None)


def write_steps(
    writer: EpisodeWriter, schema: DatasetSchema, content: ChainEpisode, start: int, stop: int
) -> bool:
    """Append rows ``start..stop-1`` of ``content``; finalize it when ``stop`` is its end.

    Returns whether the episode is now finalized. Single rows go through ``add_step``,
    longer runs through ``add_steps``; the flags ride on the last step when one is set,
    otherwise (or when no step is left) ``end()`` finalizes.
    """
    last = stop == content.num_rows
    flags = {"terminated": content.terminated, "truncated": content.truncated}
    ride = last and stop > start and (content.terminated or content.truncated)
    if stop - start == 1:
        step = _by_role(schema, content.rows, start)
        writer.add_step(_step_dict(step, flags if ride else {}))
    elif stop > start:
        steps = _by_role(schema, content.rows, slice(start, stop))
        writer.add_steps(_step_dict(steps, flags if ride else {}))
    if last and not ride:
        writer.end(**flags)
    return last


def _step_dict(by_role: dict[str, dict[str, Any]], flags: dict[str, bool]) -> dict[str, Any]:
    step: dict[str, Any] = {
        "observations": by_role["observation"],
        "actions": by_role["action"],
        "rewards": by_role["reward"],
        **flags,
    }
    if by_role["info"]:
        step["infos"] = by_role["info"]
    return step


def read_variants(path: str | os.PathLike[str]) -> dict[int, int]:
    """The variant of every episode a chain's writers began, from their report."""
    variants: dict[int, int] = {}
    with open(path, "rb") as report:
        for line in report:
            if not line.endswith(b"\n"):
                break  # torn: it cannot be, but it would mean nothing
            word, *args = line.split()
            if word in (b"add", b"start"):
                variants[int(args[0])] = int(args[1])
            elif word == b"batch":
                first, count, variant = map(int, args)
                variants.update(dict.fromkeys(range(first, first + count), variant))
    return variants


class _Report:
    """Appends whole lines to the report file, one ``write`` each."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, *words: object) -> None:
        text = " ".join(map(str, words)) + "\n"
        os.write(self._fd, text.encode())
        sys.stdout.write(text)
        sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    """Write to the dataset at ``argv[0]`` until killed; report to ``argv[1]``.

    ``argv[2]`` and ``argv[3]`` (chain seed and round) seed the choice of operations.
    """
    from episodata_core.dataset import Dataset
    from episodata_core.protocols import SupportsFlush

    location, report_path, seed, round_ = argv[0], argv[1], int(argv[2]), int(argv[3])
    report = _Report(report_path)
    rng = np.random.default_rng([seed, round_])
    print("ready", flush=True)
    if not sys.stdin.readline():
        return 4  # the chain is gone
    dataset = Dataset.open(location)
    dataset._prepare_write()  # the writable open: recovery from the last kill happens here
    schema = dataset.schema
    report.line("open", dataset.num_episodes)
    table = dataset.backend.episode_table()
    variants = read_variants(report_path)
    # episode -> (writer, rows written); some recovered episodes stay open this round
    ongoing: dict[int, tuple[EpisodeWriter, int]] = {
        int(e): (dataset.resume_episode(int(e)), int(table.length[e]) + 1)
        for e in np.flatnonzero(table.ongoing)
        if rng.random() < 0.85
    }
    flushes = isinstance(dataset.backend, SupportsFlush)
    deadline = time.monotonic() + _LIFETIME_S
    while time.monotonic() < deadline:
        choice = rng.random()
        episode = dataset.num_episodes
        # each intent line goes out once the call's arguments are built, just before the
        # call, so that a kill timed from it lands inside the call
        if choice < 0.15 and len(ongoing) < _MAX_ONGOING:
            variants[episode] = round_
            content = chain_episode(schema, episode, round_)
            report.line("start", episode, round_)
            ongoing[episode] = (start_episode(dataset, content), 1)
        elif choice < 0.35:
            bulk = bulk_episode(schema, chain_episode(schema, episode, round_))
            report.line("add", episode, round_)
            added = dataset.add_episode(bulk)
            assert added == episode, f"add_episode returned {added}, expected {episode}"
            report.line("final", episode)
        elif choice < 0.5:
            count = int(rng.integers(2, 7))
            batch = [
                bulk_episode(schema, chain_episode(schema, episode + k, round_))
                for k in range(count)
            ]
            report.line("batch", episode, count, round_)
            ids = dataset.add_episodes(batch)
            assert ids == list(range(episode, episode + count)), f"add_episodes returned {ids}"
            report.line("final", *ids)
        elif ongoing:
            episode = int(rng.choice(sorted(ongoing)))
            writer, written = ongoing[episode]
            content = chain_episode(schema, episode, variants[episode])
            stop = min(content.num_rows, written + int(rng.choice([1, 1, 1, 2, 5])))
            report.line("step", episode, stop)
            if write_steps(writer, schema, content, written, stop):
                del ongoing[episode]
                report.line("final", episode)
            else:
                ongoing[episode] = (writer, stop)
        if flushes and ongoing and rng.random() < 0.3:
            report.line("flush")
            dataset.flush()
            report.line("flushed", *(f"{e}:{n}" for e, (_, n) in sorted(ongoing.items())))
    return 3  # never killed: the chain treats this as a failure


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
