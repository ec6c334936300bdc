"""episodata_core.importing: the helpers the d4rl, lewm and minari importers share."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.errors import (
    EpisodataImportWarning,
    FormatError,
    MissingDependencyError,
)
from episodata_core.importing import (
    PendingEpisodes,
    WarningLog,
    field_reports,
    file_sha256,
    flag_counts,
    require_module,
    source_record,
)
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.transfer import FieldReport, FlagCounts, ImportWarningRecord

# -- WarningLog ------------------------------------------------------------------------


def _log(**kwargs) -> WarningLog:
    log = WarningLog("'tiny.hdf5'", **kwargs)
    log.add("nan_reward", "2 NaN rewards; imported as they are", 2)
    log.add("no_timeouts", "the file has no 'timeouts'")
    log.add("nan_reward", "a later message is not kept", 3)
    return log


def test_a_repeated_code_adds_to_its_count_and_keeps_its_first_message():
    assert _log().records == [
        ImportWarningRecord(
            code="nan_reward", message="2 NaN rewards; imported as they are", count=5
        ),
        ImportWarningRecord(code="no_timeouts", message="the file has no 'timeouts'", count=1),
    ]


def test_finish_emits_each_code_once_in_the_order_first_seen():
    log = _log()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log.finish(strict=False)
    assert [w.category for w in caught] == [EpisodataImportWarning] * 2
    assert [str(w.message) for w in caught] == [
        "'tiny.hdf5': 2 NaN rewards; imported as they are [nan_reward]",
        "'tiny.hdf5': the file has no 'timeouts' [no_timeouts]",
    ]


def test_finish_without_records_does_nothing_even_when_strict():
    log = WarningLog("'tiny.hdf5'")
    log.finish(strict=False)  # filterwarnings=error turns any warning into a failure
    log.finish(strict=True)
    assert log.records == []


def test_the_warning_points_at_the_callers_line():
    log = _log()
    with pytest.warns(EpisodataImportWarning) as caught:
        log.finish(strict=False)
    assert {w.filename for w in caught} == {__file__}


def test_frames_of_the_importers_package_are_skipped():
    # a stand-in for the importer's own module: finish() runs two frames inside it
    module = {"__name__": "acme_importer._impl"}
    exec(  # noqa: S102 - the code is the literal below
        "def outer(log):\n    return inner(log)\n\ndef inner(log):\n    log.finish(strict=False)\n",
        module,
    )
    with pytest.warns(EpisodataImportWarning) as caught:
        module["outer"](_log(package="acme_importer"))
    assert {w.filename for w in caught} == {__file__}
    with pytest.warns(EpisodataImportWarning) as caught:
        module["outer"](_log())  # without package= the importer's frame is the caller
    assert {w.filename for w in caught} == {"<string>"}


@pytest.mark.parametrize(("noun", "kwargs"), [("file", {}), ("dataset", {"noun": "dataset"})])
def test_strict_raises_a_format_error_that_lists_every_code(noun, kwargs):
    log = _log(**kwargs)
    expected = (
        rf"^'tiny.hdf5': strict=True rejects the {noun}: nan_reward \(x5\): 2 NaN rewards; "
        r"imported as they are; no_timeouts \(x1\): the file has no 'timeouts'\. "
        r"Pass strict=False to import it anyway; the report lists these warnings$"
    )
    with pytest.raises(FormatError, match=expected):
        log.finish(strict=True)  # and no warning: filterwarnings=error would fail the test


# -- report parts ----------------------------------------------------------------------


def test_flag_counts_match_hand_counts():
    terminated = np.array([True, False, True, False, False, True])
    truncated = np.array([False, False, True, True, False, False])
    # episode 1 and 4 end with neither flag; terminated and truncated include 'both'
    assert flag_counts(terminated, truncated) == FlagCounts(
        terminated=3, truncated=2, both=1, unflagged_end=2
    )
    # an importer that flags a time limit itself says which ends were unflagged at the source
    unflagged = np.array([False, True, False, True, True, False])
    assert flag_counts(terminated, truncated, unflagged) == FlagCounts(
        terminated=3, truncated=2, both=1, unflagged_end=3
    )
    empty = np.zeros(0, dtype=bool)
    assert flag_counts(empty, empty) == FlagCounts()


def test_field_reports_cover_every_field_and_default_the_source_key():
    schema = DatasetSchema(
        [
            FieldSpec("camera", shape=(2, 2), dtype="uint8"),
            FieldSpec("camera", shape=(3,), dtype="float32", role="action"),
            FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        ]
    )
    sources = {"observation/camera": "observations/pixels", "action/camera": "actions"}
    reports = field_reports(schema, sources)
    assert reports == {
        "observation/camera": FieldReport(
            role="observation", dtype="uint8", shape=(2, 2), source_key="observations/pixels"
        ),
        "action/camera": FieldReport(
            role="action", dtype="float32", shape=(3,), source_key="actions"
        ),
        "reward/reward": FieldReport(role="reward", dtype="float32", shape=(), source_key=""),
    }
    assert set(reports) == {spec.qualified_key for spec in schema}


# -- files -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, (8 << 20) + 3])  # empty, tiny, past one 8 MiB block
def test_file_sha256_matches_hashlib(tmp_path, size):
    path = tmp_path / "source.hdf5"
    path.write_bytes(np.random.default_rng(size).bytes(size))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert file_sha256(path) == expected
    assert file_sha256(str(path)) == expected


def test_source_record_puts_file_bytes_and_sha256_before_the_extras(tmp_path):
    path = tmp_path / "source.hdf5"
    path.write_bytes(b"episodes")
    record = source_record(path, hash_source=True, rows=8, profile="generic")
    assert list(record) == ["file", "bytes", "sha256", "rows", "profile"]
    assert record == {
        "file": "source.hdf5",
        "bytes": 8,
        "sha256": hashlib.sha256(b"episodes").hexdigest(),
        "rows": 8,
        "profile": "generic",
    }


def test_source_record_hashes_only_when_asked_and_may_name_another_file(tmp_path):
    path = tmp_path / "data" / "main_data.hdf5"
    path.parent.mkdir()
    path.write_bytes(b"abc")
    record = source_record(str(path), hash_source=False, file="pen-human-v2")
    assert record == {"file": "pen-human-v2", "bytes": 3, "sha256": None}


# -- dependencies ----------------------------------------------------------------------


def test_require_module_returns_the_module():
    assert require_module("json", feature="reading", install="pip install json") is json


def test_require_module_names_the_install_command_for_a_missing_module():
    with pytest.raises(MissingDependencyError) as caught:
        require_module(
            "episodata_no_such_module_xyz",
            feature="the acme importer reads ACME files",
            install='pip install "episodata[acme]"',
        )
    assert str(caught.value) == (
        "the acme importer reads ACME files with episodata_no_such_module_xyz, which is not "
        'installed: pip install "episodata[acme]"'
    )
    assert isinstance(caught.value, ImportError)
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_require_module_names_the_distribution_when_it_differs(monkeypatch):
    # as if Pillow were missing, whether or not another test imported it already
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(
        MissingDependencyError,
        match=r"^'x': decode_images=True decodes images with Pillow, which is not installed: "
        r"pip install Pillow$",
    ):
        require_module(
            "PIL.Image",
            feature="'x': decode_images=True decodes images",
            install="pip install Pillow",
            distribution="Pillow",
        )


def test_importing_the_module_imports_no_optional_library():
    code = (
        "import sys, episodata_core.importing; "
        "print(sorted(m for m in ('h5py', 'hdf5plugin', 'PIL') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# -- PendingEpisodes ---------------------------------------------------------------------


def _state_episode(steps: int, start: int) -> dict[str, object]:
    states = np.arange(start, start + 2 * (steps + 1), dtype=np.float32).reshape(steps + 1, 2)
    return {
        "initial_observation": {"state": states[0]},
        "observations": {"state": states[1:]},
        "actions": np.zeros(steps, dtype=np.int64),
    }


def test_pending_episodes_write_together_once_they_reach_max_bytes():
    schema = DatasetSchema(
        [
            FieldSpec("state", shape=(2,), dtype="float32"),
            FieldSpec("action", shape=(), dtype="int64", role="action"),
        ]
    )
    dataset = Dataset.create(schema)
    calls: list[int] = []
    add_episodes = dataset.add_episodes

    def counting(episodes, **kwargs):
        episodes = list(episodes)
        calls.append(len(episodes))
        return add_episodes(episodes, **kwargs)

    dataset.add_episodes = counting  # type: ignore[method-assign]
    # 3 steps: 8 + 24 + 24 bytes of arrays; three episodes pass 150 bytes
    pending = PendingEpisodes(dataset, max_bytes=150)
    for k in range(4):
        pending.add(_state_episode(3, 10 * k))
    assert calls == [3]
    assert dataset.num_episodes == 3
    assert pending.write() == [3]
    assert pending.write() == []
    assert calls == [3, 1]
    for k, episode in enumerate(dataset):
        np.testing.assert_array_equal(
            episode.read().all_obs.state,
            np.arange(10 * k, 10 * k + 8, dtype=np.float32).reshape(4, 2),
        )
