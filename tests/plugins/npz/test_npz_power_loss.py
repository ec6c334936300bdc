"""Power loss (issue 13): the npz writer cut off by a simulated power loss, chain after chain.

See ``episodata_core.testing.power_loss``. Both folder models run: the POSIX one (a new
name is durable once its folder is synced) and the journaled one (ext4, XFS: once
anything is synced), which is not weaker: it may keep a rename whose file's bytes were
never synced, the zero-length file of ext4.
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

RECOVERY_REPORTED = False
"""Whether the recovering open must log an INFO record containing 'recovered' on the
'episodata' logger."""


@pytest.mark.parametrize("namespace", ["synced", pytest.param("journaled", marks=pytest.mark.slow)])
def test_power_loss(tmp_path: Path, namespace: str) -> None:
    figures = check_power_loss(
        "npz_directory",
        str(tmp_path / "ds"),
        example_schema(),
        seed=0,
        cuts=2,
        namespace=namespace,  # type: ignore[arg-type]
        expect_recovery_report=RECOVERY_REPORTED,
    )
    print(figures.summary())
    assert figures.cuts == 2
    assert figures.durable > 0  # the writers got episodes past a flush before each cut


@pytest.mark.slow
@pytest.mark.parametrize("namespace", ["synced", "journaled"])
@pytest.mark.parametrize("seed", range(1, 4))
def test_power_loss_chains(tmp_path: Path, seed: int, namespace: str) -> None:
    figures = check_power_loss(
        "npz_directory",
        str(tmp_path / "ds"),
        example_schema(),
        seed=seed,
        cuts=8,
        flushes=5,
        max_delay=0.2,
        namespace=namespace,  # type: ignore[arg-type]
        expect_recovery_report=RECOVERY_REPORTED,
    )
    print(figures.summary())
    assert figures.cuts == 8
