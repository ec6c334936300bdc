"""Exporter rejections: error type, message, and nothing left at the destination."""

from __future__ import annotations

import numpy as np
import pytest
from segments_fixtures import dataset_from_swm, swm_source, swm_tiny_case

import episodata
import episodata_segments._builder as builder_module
import episodata_segments._export as export_module
from episodata_core.errors import (
    DatasetStateError,
    EpisodataWarning,
    FormatError,
    IntegrityError,
    NonFiniteError,
)
from episodata_segments._plan import Plan

OPTIONS = {"offset": 3, "episodes_per_env": 2, "seed": 42}


def _export(datasets, out, **options):
    return episodata.export_datasets("offset-segments", datasets, out, **{**OPTIONS, **options})


def _assert_nothing_written(tmp_path, name="out"):
    assert not (tmp_path / name).exists()
    assert not (tmp_path / f"{name}.partial").exists()


def _tiny_with(column: str, row: int, value) -> dict:
    source = swm_source()
    source.columns[column] = source.columns[column].copy()
    source.columns[column][row] = value
    return {"toy": dataset_from_swm(source)}


def test_nan_in_a_sampled_state_is_refused_after_cleanup(tmp_path):
    # global row 6 is episode 1, row 2: inside segment toy/001 (rows 1..4), the second file
    datasets = _tiny_with("state", 6, np.nan)
    with pytest.raises(NonFiniteError, match=r"toy/001.*'state': 2 non-finite values"):
        _export(datasets, tmp_path / "out")
    _assert_nothing_written(tmp_path)


def test_nonfinite_action_is_refused(tmp_path):
    datasets = _tiny_with("action", 1, np.inf)
    with pytest.raises(NonFiniteError, match=r"toy/000.*'action'"):
        _export(datasets, tmp_path / "out")
    _assert_nothing_written(tmp_path)


def test_exclude_nonfinite_episodes_shrinks_the_pool(tmp_path):
    datasets = _tiny_with("state", 6, np.nan)
    with pytest.raises(FormatError, match=r"only 1 of 3 pooled episodes are eligible.*1 excluded"):
        _export(datasets, tmp_path / "out", exclude_nonfinite_episodes=True)
    _assert_nothing_written(tmp_path)
    report = _export(
        datasets, tmp_path / "out", exclude_nonfinite_episodes=True, episodes_per_env=1
    )
    assert report.environments["toy"].excluded_nonfinite == 1
    assert report.environments["toy"].eligible == 1


def test_infinite_diagnostic_is_kept_with_a_warning(tmp_path):
    datasets = _tiny_with("success", 1, np.inf)
    with pytest.warns(EpisodataWarning, match=r"\+-inf values \(toy/success: 1\)"):
        report = _export(datasets, tmp_path / "out")
    assert report.warnings[0].code == "infinite_values"


def test_too_few_eligible_episodes(tmp_path):
    datasets, _ = swm_tiny_case()
    with pytest.raises(
        ValueError, match=r"only 2 of 3 pooled episodes are eligible.*episodes_per_env=3"
    ):
        _export(datasets, tmp_path / "out", episodes_per_env=3)
    _assert_nothing_written(tmp_path)
    with pytest.raises(ValueError, match=r"only 0 of 3"):
        _export(datasets, tmp_path / "out", offset=6, episodes_per_env=1)
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("label", ["Push T", "pusht/x", "_x", "", "../x"])
def test_bad_label(tmp_path, label):
    datasets, _ = swm_tiny_case()
    with pytest.raises(ValueError, match=r"label .* is not allowed"):
        _export({label: datasets["toy"]}, tmp_path / "out")
    _assert_nothing_written(tmp_path)


def test_existing_destination_is_left_alone(tmp_path):
    datasets, _ = swm_tiny_case()
    (tmp_path / "out").mkdir()
    (tmp_path / "out/keep.txt").write_text("mine")
    with pytest.raises(DatasetStateError, match=r"already exists.*overwrite=True"):
        _export(datasets, tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    assert not (tmp_path / "out.partial").exists()


def test_interrupted_partial_folder_is_reported(tmp_path):
    datasets, _ = swm_tiny_case()
    (tmp_path / "out.partial").mkdir()
    with pytest.raises(DatasetStateError, match=r"interrupted export"):
        _export(datasets, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_field_named_like_a_reserved_member(tmp_path):
    source = swm_source()
    source.columns["offset"] = np.zeros(13, dtype=np.int64)
    with pytest.raises(ValueError, match=r"'info/offset' is named like a reserved segment member"):
        _export({"toy": dataset_from_swm(source)}, tmp_path / "out")
    _assert_nothing_written(tmp_path)


def test_fields_without_an_action(tmp_path):
    datasets, _ = swm_tiny_case()
    with pytest.raises(FormatError, match=r"include no action-role field"):
        _export(datasets, tmp_path / "out", fields=["state", "pixels"])


def test_unknown_option_labels(tmp_path):
    datasets, _ = swm_tiny_case()
    with pytest.raises(FormatError, match=r"pool_limit: labels \['other'\] are not exported"):
        _export(datasets, tmp_path / "out", pool_limit={"other": 3})
    with pytest.raises(ValueError, match=r"offset"):
        _export(datasets, tmp_path / "out", offset=0)
    _assert_nothing_written(tmp_path)


# -- traps 4 and 5 caught by validation --------------------------------------------------------


def _with_extra_action(original):
    def cut(dataset, layout, segment):
        arrays = original(dataset, layout, segment)
        arrays["action"] = np.concatenate([arrays["action"], arrays["action"][-1:]])
        return arrays

    return cut


def _with_k_rewards(original):
    def cut(dataset, layout, segment):
        arrays = original(dataset, layout, segment)
        arrays["reward"] = arrays["reward"][1:]
        return arrays

    return cut


@pytest.mark.parametrize("fault", [_with_extra_action, _with_k_rewards])
def test_trap_4_wrong_row_counts_fail_validation(tmp_path, monkeypatch, fault):
    datasets, _ = swm_tiny_case()
    monkeypatch.setattr(builder_module, "cut_segment", fault(builder_module.cut_segment))
    with pytest.raises(IntegrityError, match=r"validation V2 failed .*toy/000"):
        _export(datasets, tmp_path / "out")
    _assert_nothing_written(tmp_path)
    # published without validation, the importer refuses it by its headers
    _export(datasets, tmp_path / "out", validate=False)
    with pytest.raises(FormatError, match=r"the \.npy header says"):
        episodata.import_dataset("offset-segments", tmp_path / "out")


def test_trap_5_sorted_plan_fails_validation(tmp_path, monkeypatch):
    source = swm_source(tuple(t + 1 for t in (30, 24, 26, 25, 40, 10, 25, 60, 24, 33)), pixels=2)
    real = export_module.draw_plan

    def sorted_plan(pool, offset, count, seed, label):
        plan = real(pool, offset, count, seed, label)
        order = np.argsort(plan.episodes)
        return Plan(
            episodes=tuple(plan.episodes[i] for i in order),
            starts=tuple(plan.starts[i] for i in order),
        )

    monkeypatch.setattr(export_module, "draw_plan", sorted_plan)
    with pytest.raises(IntegrityError, match=r"validation V6 failed for label 'long'"):
        _export({"long": dataset_from_swm(source)}, tmp_path / "out", offset=25, episodes_per_env=3)
    _assert_nothing_written(tmp_path)
