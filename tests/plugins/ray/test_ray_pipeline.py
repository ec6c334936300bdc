"""The ray executor: the same dataset as the local executor, file for file and episode for episode."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from ray_helpers import assert_same_episodes
from tests.fixtures.hdf5_sources import check_dataset, d4rl_tiny, d4rl_v0, swm_tiny

from episodata import Dataset
from episodata_core.pipeline import Pipeline, load_config

pytestmark = pytest.mark.usefixtures("ray_session")

HERE = Path(__file__).resolve().parent


def _fixtures(name: str, folder: str):
    """A sibling test folder's fixture module, loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location(
        f"_ray_{name}", HERE.parent / folder / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _toml(importer: str, files: list[Path] | str, store: Path, executor: str, **options) -> str:
    path = json.dumps(files if isinstance(files, str) else [str(f) for f in files])
    opts = ", ".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    return (
        f'[source]\nimporter = "{importer}"\npath = {path}\noptions = {{ {opts} }}\n'
        f'[store]\npath = "{store}"\n[executor]\nname = "{executor}"\n'
    )


def run_both(tmp_path: Path, importer: str, files, **options):
    """Run the pipeline with the local and with the ray executor; both datasets, open."""
    results = {}
    for executor in ("local", "ray"):
        text = _toml(importer, files, tmp_path / f"out-{executor}", executor, **options)
        pipeline = Pipeline(load_config(text), allow_import_paths=":" in importer)
        results[executor] = pipeline.run(progress=False)
    return results["local"], results["ray"]


def test_d4rl_files_equal_the_local_executor(tmp_path):
    first, oracle_a = d4rl_tiny(tmp_path, case="A")
    second, oracle_b = d4rl_tiny(tmp_path, case="A", timeout_at_3=True)
    local, ray = run_both(tmp_path, "d4rl", [first, second, first])
    assert_same_episodes(ray.dataset, local.dataset)
    # and both against the files' own oracles, so a shared mistake shows too
    count_a = len(oracle_a.episodes)
    imports = ray.dataset.manifest.metadata["imports"]
    assert [r["first_episode_id"] for r in imports] == [
        0,
        count_a,
        count_a + len(oracle_b.episodes),
    ]
    assert [r["source"]["file"] for r in imports] == [first.name, second.name, first.name]
    assert ray.import_report.episodes_imported == local.import_report.episodes_imported
    assert ray.import_report.episodes_imported == 2 * count_a + len(oracle_b.episodes)
    executor = ray.dataset.manifest.metadata["pipeline"]["executor"]
    assert executor["name"] == "ray"
    assert executor["tasks"] == 3
    assert executor["cluster"]["cpus"] == 2
    assert executor["versions"]["episodata-ray"] == "0.3.0"
    assert local.dataset.manifest.metadata["pipeline"]["executor"] == {"name": "local"}
    # the staging area is gone, and the dataset opens as complete
    assert not Path(f"{tmp_path / 'out-ray'}.episodata-staging").exists()
    local.dataset.close()
    ray.dataset.close()
    reopened = Dataset.open(tmp_path / "out-ray")
    assert reopened.num_episodes == 2 * count_a + len(oracle_b.episodes)
    reopened.close()


def test_importer_warnings_of_a_task_reach_the_caller(tmp_path):
    from episodata_core.errors import EpisodataImportWarning

    source, _ = d4rl_v0(tmp_path)
    text = _toml("d4rl", [source], tmp_path / "out", "ray")
    with pytest.warns(EpisodataImportWarning, match=r"no 'timeouts'.*\[no_timeouts\]"):
        result = Pipeline(load_config(text)).run(progress=False)
    result.dataset.close()


def test_progress_shows_tasks_episodes_and_throughput(tmp_path, capsys):
    first, _ = d4rl_tiny(tmp_path, case="A")
    second, _ = d4rl_tiny(tmp_path, case="A", timeout_at_3=True)
    text = _toml("d4rl", [first, second], tmp_path / "out", "ray")
    result = Pipeline(load_config(text)).run(progress=True)
    err = capsys.readouterr().err
    assert "importing" in err
    assert "2/2" in err
    assert f"{result.dataset.num_episodes} episodes" in err
    assert "MB/s" in err
    result.dataset.close()


@pytest.mark.slow
def test_a_glob_is_expanded_in_sorted_order(tmp_path):
    folder = tmp_path / "sources"
    folder.mkdir()
    d4rl_tiny(folder, case="A", timeout_at_3=True)
    d4rl_tiny(folder, case="A")
    local, ray = run_both(tmp_path, "d4rl", str(folder / "*.hdf5"))
    assert_same_episodes(ray.dataset, local.dataset)
    files = [r["source"]["file"] for r in ray.dataset.manifest.metadata["imports"]]
    assert files == ["d4rl-tiny-A-t3.hdf5", "d4rl-tiny-A.hdf5"]
    local.dataset.close()
    ray.dataset.close()


def test_one_file_equals_the_oracle_and_the_local_executor(tmp_path):
    source, oracle = d4rl_v0(tmp_path)
    local, ray = run_both(tmp_path, "d4rl", [source], max_episode_steps=4)
    assert_same_episodes(ray.dataset, local.dataset)
    check_dataset(ray.dataset, ray.import_report, oracle)
    local.dataset.close()
    ray.dataset.close()


@pytest.mark.slow
def test_lewm_files_equal_the_local_executor(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = swm_tiny(tmp_path / "a")
    second, _ = swm_tiny(tmp_path / "b", form="gzip")
    local, ray = run_both(tmp_path, "lewm", [first, second])
    assert_same_episodes(ray.dataset, local.dataset)
    local.dataset.close()
    ray.dataset.close()


@pytest.mark.slow
def test_minari_datasets_equal_the_local_executor(tmp_path):
    minari = _fixtures("minari_fixtures", "minari")
    first = minari.tiny(tmp_path / "first")
    second = minari.tiny(tmp_path / "second", dataset_id="other/tiny-v0")
    local, ray = run_both(tmp_path, "minari", [first, second])
    assert_same_episodes(ray.dataset, local.dataset)
    local.dataset.close()
    ray.dataset.close()


def test_offset_segment_archives_equal_the_local_executor(tmp_path):
    import episodata

    segments = _fixtures("segments_fixtures", "segments")
    archives = []
    for number, case in enumerate((segments.swm_tiny_case, segments.two_label_case)):
        datasets, oracle = case()
        archive = tmp_path / f"archive-{number}"
        episodata.export_datasets("offset-segments", datasets, archive, **oracle.options)
        archives.append(archive)
    local, ray = run_both(tmp_path, "offset-segments", archives)
    assert_same_episodes(ray.dataset, local.dataset)
    local.dataset.close()
    ray.dataset.close()
