"""Faults under the ray executor: a killed task is retried, an interrupted pipeline resumes."""

from __future__ import annotations

import _thread
import threading
import time
from pathlib import Path

import pytest
from ray_helpers import assert_same_episodes
from tests.fixtures.hdf5_sources import d4rl_tiny

from episodata import Dataset
from episodata_core.errors import DatasetStateError
from episodata_core.pipeline import Pipeline, load_config

pytestmark = pytest.mark.usefixtures("ray_session")

FAULTY = "tests.fixtures.ray_faulty:FaultyD4RL"


def _pipeline(files: list[Path], store: Path, executor: str) -> Pipeline:
    paths = ", ".join(f'"{f}"' for f in files)
    text = (
        f'[source]\nimporter = "{FAULTY}"\npath = [{paths}]\n'
        f'[store]\npath = "{store}"\n[executor]\nname = "{executor}"\n'
    )
    return Pipeline(load_config(text), allow_import_paths=True)


def _sources(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "sources"
    folder.mkdir()
    first, _ = d4rl_tiny(folder, case="A")
    second, _ = d4rl_tiny(folder, case="A", timeout_at_3=True)
    return [first, second, first]


def test_a_killed_task_is_retried_without_duplicate_or_missing_episodes(tmp_path):
    files = _sources(tmp_path)
    reference = _pipeline(files, tmp_path / "local", "local").run(progress=False)
    # the task of the second file writes its episodes, then its worker process exits
    Path(f"{files[1]}.kill").touch()
    result = _pipeline(files, tmp_path / "ray", "ray").run(progress=False)
    killed = Path(f"{files[1]}.killed")
    assert killed.exists(), "the fault did not fire: the test proves nothing"
    assert_same_episodes(result.dataset, reference.dataset)
    assert result.dataset.num_episodes == reference.dataset.num_episodes
    reference.dataset.close()
    result.dataset.close()


def _interrupt_when_published(staging: Path, count: int, timeout: float = 60.0) -> threading.Thread:
    """Ctrl-C the main thread once ``count`` shards are published in ``staging``."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            published = [
                p
                for p in staging.glob("*")
                if ".tmp-" not in p.name and (p / "manifest.json").exists()
            ]
            if len(published) >= count:
                _thread.interrupt_main()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_an_interrupted_pipeline_is_marked_incomplete_and_resumes(tmp_path):
    folder = tmp_path / "sources"
    folder.mkdir()
    first, _ = d4rl_tiny(folder, case="A")
    second, _ = d4rl_tiny(folder, case="A", timeout_at_3=True)
    third = folder / "third.hdf5"
    third.write_bytes(first.read_bytes())
    files = [first, second, third]
    store = tmp_path / "ray"
    hang = Path(f"{third}.hang")
    hang.touch()  # the third task waits until the test has interrupted the run
    watcher = _interrupt_when_published(Path(f"{store}.episodata-staging"), 2)
    with pytest.raises(KeyboardInterrupt):
        _pipeline(files, store, "ray").run(progress=False)
    watcher.join()
    hang.unlink()
    with pytest.raises(DatasetStateError, match="incomplete: import"):
        Dataset.open(store)
    resumed_pipeline = _pipeline(files, store, "ray")
    resumed = resumed_pipeline.run(progress=False)
    executor = resumed.dataset.manifest.metadata["pipeline"]["executor"]
    assert executor["shards_reused"] == 2, "the rerun did not resume from the shards"
    reference = _pipeline(files, tmp_path / "local", "local").run(progress=False)
    assert_same_episodes(resumed.dataset, reference.dataset)
    resumed.dataset.close()
    reference.dataset.close()
    assert Dataset.open(store).num_episodes == reference.dataset.num_episodes
