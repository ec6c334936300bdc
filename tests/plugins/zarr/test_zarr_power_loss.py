"""Power loss (issue 13): the Zarr writer cut off by a simulated power loss, chain after chain.

``check_power_loss`` (``episodata_core.testing.power_loss``) runs the kill chain's writer
under the power-cut layer, cuts it after a returned ``flush()``, and checks the durable
image: what was finalized before the last returned flush is there and identical, nothing
is torn, ``verify()`` is clean, the dataset takes new episodes.

Under the POSIX model (a new name is durable once its folder is synced) today's backend
fails at the first cut, see ``POSIX_FAILURE``; under the journaled model (ext4, XFS: a
sync commits every name made before it) it passes.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from episodata_core.testing import example_schema
from episodata_core.testing.power_loss import check_power_loss

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD is Linux only")

RECOVERY_REPORTED = True
"""The recovering open logs an INFO record containing 'recovered' on the 'episodata' logger."""


def test_power_loss_posix_folders(tmp_path: Path) -> None:
    check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=0,
        cuts=1,
        expect_recovery_report=RECOVERY_REPORTED,
    )


@pytest.mark.slow  # 25 s; test_power_loss_posix_folders guards the same syncs in the default run
def test_power_loss_posix_folders_many_new_chunk_folders(tmp_path: Path) -> None:
    # 64-byte chunks: every fold makes dozens of new c/<n>/ folders, whose names only a
    # sync of their parents makes durable (the folder syncs run together, in threads)
    figures = check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=7,
        cuts=2,
        chunk_bytes=64,
        expect_recovery_report=RECOVERY_REPORTED,
    )
    assert figures.durable > 0


def test_power_loss_journaled_folders(tmp_path: Path) -> None:
    figures = check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=0,
        cuts=2,
        namespace="journaled",
        expect_recovery_report=RECOVERY_REPORTED,
    )
    print(figures.summary())
    assert figures.cuts == 2
    assert figures.durable > 0  # the writers got episodes past a flush before each cut


def test_power_loss_catches_a_writer_that_never_syncs(tmp_path: Path) -> None:
    # fsync=False survives a crash of the process, not of the machine: the check must see it
    with pytest.raises(
        AssertionError, match=r"episode \d+ \(reported (finalized|flushed)\) is gone"
    ):
        check_power_loss(
            "zarr",
            str(tmp_path / "ds"),
            example_schema(),
            seed=0,
            cuts=1,
            namespace="journaled",
            fsync=False,
        )


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 5))
def test_power_loss_chains_journaled(tmp_path: Path, seed: int) -> None:
    # every other chain is sharded: a commit then rewrites a whole shard file
    options = {"shard_chunks": 4} if seed % 2 else {}
    figures = check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=seed,
        cuts=6,
        flushes=5,
        max_delay=0.2,
        namespace="journaled",
        expect_recovery_report=RECOVERY_REPORTED,
        **options,
    )
    print(figures.summary())
    assert figures.cuts == 6


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 3))
def test_power_loss_chains_posix(tmp_path: Path, seed: int) -> None:
    check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=seed,
        cuts=6,
        flushes=5,
        max_delay=0.2,
        expect_recovery_report=RECOVERY_REPORTED,
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5, 7))
def test_power_loss_chains_sync_interval(tmp_path: Path, seed: int) -> None:
    # the default durability: what a finalize covered is power-durable sync_interval
    # seconds after it returned, flush or not; cuts land up to 3 s after a flush
    figures = check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=seed,
        cuts=4,
        max_delay=3.0,
        namespace="journaled",
        sync_interval=1.0,
        expect_recovery_report=RECOVERY_REPORTED,
    )
    print(figures.summary())
    assert figures.cuts == 4


def test_power_loss_keeps_every_finalize_in_sync_mode(tmp_path: Path) -> None:
    # durability="sync": each finalize is on the disk when it returns, flush or not
    # (the slack covers only the time between the return and the writer's report)
    figures = check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=3,
        cuts=2,
        max_delay=0.5,
        sync_interval=0.0,
        interval_slack=0.05,
        durability="sync",
        expect_recovery_report=RECOVERY_REPORTED,
    )
    print(figures.summary())
    assert figures.cuts == 2


def test_power_loss_drops_only_unsynced_finalizes_in_interval_mode(tmp_path: Path) -> None:
    # the default mode: a finalize is power-durable sync_interval seconds later at most
    figures = check_power_loss(
        "zarr",
        str(tmp_path / "ds"),
        example_schema(),
        seed=4,
        cuts=2,
        max_delay=2.5,
        sync_interval=1.0,  # the backend's default sync_interval
        expect_recovery_report=RECOVERY_REPORTED,
    )
    print(figures.summary())
    assert figures.cuts == 2
