"""The offset-segments exporter and importer under the conformance kit (formats.md §5.3).

The oracles come from ``segments_fixtures``: the §3.2 plan re-implemented from the spec
text, and segment members sliced from the swm source columns (never from the plugin).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from typing import TYPE_CHECKING, Any

import numpy as np
from segments_fixtures import (
    dataset_from_swm,
    pusht_case,
    swm_source,
    swm_tiny_case,
    two_label_case,
)

import episodata
from episodata_core.errors import IntegrityError, NonFiniteError
from episodata_core.testing import (
    BadSource,
    ExpectedEpisode,
    ExpectedImport,
    ExportCase,
    ExporterTests,
    FailingExport,
    ImporterTests,
)
from episodata_segments import OffsetSegmentsExporter, OffsetSegmentsImporter

if TYPE_CHECKING:
    from pathlib import Path

    from segments_fixtures import ExportOracle

OBSERVATIONS = ("pixels", "state")  # the observation-role fields of dataset_from_swm
SCALARS = ("env", "source_episode", "start_step", "goal_step", "offset")
FLAGS = ("terminated", "truncated")
CASES = {"toy": swm_tiny_case, "pusht": pusht_case, "two-labels": two_label_case}


def _role(name: str) -> str:
    if name in ("action", "reward"):
        return name
    return "observation" if name in OBSERVATIONS else "info"


def expected_import(oracle: ExportOracle) -> ExpectedImport:
    """§3.10 applied to the oracle's segment members: one episode of K transitions each."""
    k = oracle.options["offset"]
    # env_order (labels sorted), then draw order
    ids = sorted(oracle.segments, key=lambda sid: (sid.split("/")[0], sid))
    episodes, columns = [], {}
    for segment_id in ids:
        segment = oracle.segments[segment_id]
        groups: dict[str, dict[str, np.ndarray]] = {"reward": {}}
        for name, value in segment.members.items():
            if name not in SCALARS and name not in FLAGS:
                groups.setdefault(_role(name), {})[name] = value
        terminated = segment.terminated_at_goal
        episodes.append(
            ExpectedEpisode(
                observations=groups["observation"],
                actions=groups["action"],
                # reward[0] arrived at the start, before the segment: dropped
                rewards={name: value[1:] for name, value in groups["reward"].items()},
                infos=groups["info"],
                terminated=terminated,
                truncated=not terminated or segment.truncated_at_goal,  # a segment is a cut
            )
        )
        provenance = {
            "env": segment_id.split("/")[0],
            "segment_id": segment_id,
            "source_episode": segment.episode,
            "source_episode_id": segment.source_episode_id,
            "start_step": segment.start,
            "goal_step": segment.start + k,
            "offset": k,
            "goal_row": k,
        }
        for name, value in provenance.items():
            columns.setdefault(name, []).append(value)
    n = len(ids)
    return ExpectedImport(
        episodes=episodes,
        report={
            "rows_read": n * (k + 1),
            "episodes_found": n,
            "final_transitions_dropped": 0,
            "episodes_skipped": {},
        },
        provenance=columns,
        source={"offset": k, "seed": oracle.options["seed"], "segments_total": n},
    )


def export_case(name: str) -> ExportCase:
    datasets, oracle = CASES[name]()
    return ExportCase(datasets, oracle.options, oracle, expected_import(oracle), name)


def _members(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


class TestOffsetSegmentsExporterKit(ExporterTests[OffsetSegmentsExporter]):
    exporter_cls = OffsetSegmentsExporter
    round_trip_importer = "offset-segments"

    def export_cases(self) -> list[ExportCase]:
        return [export_case(name) for name in CASES]

    def check_export(self, destination: Path, case: ExportCase, report: Any) -> None:
        oracle: ExportOracle = case.oracle
        rows = [
            json.loads(line) for line in (destination / "manifest.jsonl").read_text().splitlines()
        ]
        assert [row["segment_id"] for row in rows] == sorted(
            oracle.segments, key=lambda sid: (sid.split("/")[0], sid)
        )
        for row in rows:
            expected = oracle.segments[row["segment_id"]]
            assert row["path"] == expected.path
            assert (row["source_episode"], row["start_step"]) == (expected.episode, expected.start)
            assert row["nan_counts"] == expected.nan_counts
            assert row["terminated_at_goal"] == expected.terminated_at_goal
            members = _members(destination / expected.path)
            assert sorted(members) == sorted(expected.members), row["segment_id"]
            for name, value in expected.members.items():
                assert members[name].dtype == value.dtype, (row["segment_id"], name)
                np.testing.assert_array_equal(members[name], value, strict=True)
        for line in (destination / "SHA256SUMS").read_text().splitlines():
            digest, path = line.split("  ", 1)
            assert hashlib.sha256((destination / path).read_bytes()).hexdigest() == digest
        assert report.segments_total == len(oracle.segments)

    def failing_exports(self) -> list[FailingExport]:
        datasets, oracle = swm_tiny_case()
        nan_state = swm_source()
        nan_state.columns["state"] = nan_state.columns["state"].copy()
        nan_state.columns["state"][6] = np.nan  # inside toy/001, the second file written
        return [
            FailingExport(
                datasets, {**oracle.options, "episodes_per_env": 3}, ValueError, "only 2"
            ),
            FailingExport(
                {"toy": dataset_from_swm(nan_state)}, oracle.options, NonFiniteError, "toy/001"
            ),
            FailingExport({"Push T": datasets["toy"]}, oracle.options, ValueError, "label"),
        ]


class TestOffsetSegmentsImporterKit(ImporterTests[OffsetSegmentsImporter]):
    importer_cls = OffsetSegmentsImporter

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        built = []
        for name in CASES:
            case = export_case(name)
            archive = directory / name
            episodata.export_datasets("offset-segments", case.datasets, archive, **case.options)
            assert case.round_trip is not None
            built.append((archive, case.round_trip))
        return built

    def bad_sources(self, directory: Path) -> list[BadSource]:
        datasets, oracle = swm_tiny_case()
        good = directory / "good"
        episodata.export_datasets("offset-segments", datasets, good, **oracle.options)
        flipped, missing, forged = (
            directory / "flipped",
            directory / "missing",
            directory / "forged",
        )
        for copy in (flipped, missing, forged):
            shutil.copytree(good, copy)
        member = flipped / "episodes/toy/episode_000.npz"
        data = bytearray(member.read_bytes())
        data[len(data) // 2] ^= 0x01
        member.write_bytes(bytes(data))
        (missing / "episodes/toy/episode_001.npz").unlink()
        # a forger who edits a member and rewrites SHA256SUMS passes read_schema; the
        # content hash in the manifest fails during import_into, after the destination exists
        member = forged / "episodes/toy/episode_001.npz"
        with np.load(member, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        arrays["state"] = arrays["state"] + 1
        np.savez(member, **arrays)
        sums = []
        for line in (forged / "SHA256SUMS").read_text().splitlines():
            path = line.split("  ", 1)[1]
            sums.append(f"{hashlib.sha256((forged / path).read_bytes()).hexdigest()}  {path}\n")
        (forged / "SHA256SUMS").write_text("".join(sums))
        return [
            BadSource(flipped, IntegrityError, re.escape("episode_000.npz' does not match")),
            BadSource(missing, IntegrityError, "listed in SHA256SUMS but missing"),
            BadSource(forged, IntegrityError, "content_sha256 does not match"),
        ]
