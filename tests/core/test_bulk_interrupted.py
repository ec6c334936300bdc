"""Interrupted bulk writes: the target is absent, complete, or clearly marked incomplete.

Writers are real child processes killed with SIGKILL or interrupted with SIGINT in the
middle of ``from_episodes`` and of ``episodata copy``; the episodes they were writing
are built from their ids (``_oracle``), so every check compares with values the code
under test never produced. The children write one episode per commit (a 1-byte batch
bound), so that a kill lands between commits of a long write.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pytest
from _oracle import (
    SCHEMA,
    assert_dataset,
    assert_episode,
    child,
    episode,
    observations,
    steps_of,
)
from pydantic import BaseModel, ConfigDict

from episodata import Dataset
from episodata_core import registry
from episodata_core.cli import main
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.transfer import ImportReport, ImportResult, import_dataset

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from episodata import DatasetSchema

BACKENDS = ["zarr", "npz_directory"]
TOTAL = 40

# from_episodes(TOTAL episodes) into argv[1] with argv[2]; prints each id it hands over
CHILD_FROM_EPISODES = """
import sys, time
import episodata_core.dataset
from _oracle import SCHEMA, episode
from episodata import Dataset

episodata_core.dataset.BATCH_BYTES = 1  # one commit per episode

def episodes():
    for i in range(int(sys.argv[3])):
        print(i, flush=True)
        time.sleep(0.01)
        yield episode(i)

Dataset.from_episodes(episodes(), SCHEMA, sys.argv[1], backend=sys.argv[2]).close()
print("done", flush=True)
"""

# the episodata command, one commit per episode; prints each source episode it reads
CHILD_CLI = """
import sys, time
import episodata_core.dataset
from episodata_core.cli import main
from episodata_npz import NpzDirectoryBackend

episodata_core.dataset.BATCH_BYTES = 1
read_rows = NpzDirectoryBackend.read_rows

def reporting(self, episode, start, stop, fields):
    print(episode, flush=True)
    time.sleep(0.01)
    return read_rows(self, episode, start, stop, fields)

NpzDirectoryBackend.read_rows = reporting
sys.exit(main(sys.argv[1:]))
"""

ONGOING = frozenset({7, 21, TOTAL - 1})


def _source(path: Path) -> str:
    """A stored source of TOTAL oracle episodes; those in ONGOING are left ongoing."""
    dataset = Dataset.create(SCHEMA, str(path), backend="npz_directory")
    for i in range(TOTAL):
        if i not in ONGOING:
            dataset.add_episode(episode(i))
            continue
        bulk = episode(i)
        writer = dataset.new_episode(bulk["initial_observation"])
        for t in range(steps_of(i)):
            writer.add_step(
                {
                    "observations": {"state": bulk["observations"]["state"][t]},
                    "actions": bulk["actions"][t],
                    "rewards": bulk["rewards"][t],
                }
            )
    dataset.close()
    return str(path)


def _lines(process: subprocess.Popen[str]) -> Iterator[str]:
    assert process.stdout is not None
    for line in process.stdout:
        yield line.strip()


def _kill_after(process: subprocess.Popen[str], handed_over: int, sig: int) -> None:
    """Signal ``process`` once it has handed over ``handed_over`` episodes."""
    for line in _lines(process):
        if line.isdigit() and int(line) >= handed_over:
            break
    else:
        pytest.fail(f"the child ended early (exit {process.wait()})")
    time.sleep(0.005)  # somewhere in the next episode's write
    process.send_signal(sig)
    process.wait(timeout=60)


def _marked_count(path: Path, operation: str, ongoing: frozenset[int] = frozenset()) -> int:
    """The target is marked incomplete by ``operation``: refused, and every episode it
    holds is the oracle's; returns how many it holds."""
    with pytest.raises(DatasetStateError, match=rf"incomplete: {operation}\b.*interrupted after"):
        Dataset.open(path)
    inspect = Dataset.open(path, read_only=True, allow_incomplete=True)
    count = inspect.num_episodes
    assert 0 < count < TOTAL, f"{count} episodes: the kill did not land mid-write"
    table = inspect.backend.episode_table()
    finalized = [i for i in range(count) if not table.ongoing[i]]
    for i in finalized:
        assert_episode(inspect, i, ongoing=i in ongoing)
    inspect.close()
    return count


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_an_interrupted_from_episodes_is_marked_and_a_rerun_replaces_it(
    backend: str, sig: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ds"
    process = child(
        CHILD_FROM_EPISODES,
        str(path),
        backend,
        str(TOTAL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with process:
        _kill_after(process, 12, sig)
    count = _marked_count(path, "from_episodes")
    # info describes it, with one line saying what happened
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    line = re.search(
        r"^incomplete: from_episodes .* interrupted after (\d+) episodes$", out, re.MULTILINE
    )
    assert line is not None, out
    assert int(line.group(1)) == count
    assert main(["verify", str(path)]) == 1
    assert f"INCOMPLETE {path}: from_episodes" in capsys.readouterr().out
    # plain create does not replace it, a rerun of the bulk write does
    with pytest.raises(DatasetStateError, match="marked incomplete"):
        Dataset.create(SCHEMA, str(path), backend=backend)
    rerun = Dataset.from_episodes(
        (episode(i) for i in range(TOTAL)), SCHEMA, str(path), backend=backend
    )
    rerun.close()
    assert_dataset(Dataset.open(path, read_only=True), TOTAL)
    assert "incomplete" not in json.loads((path / "manifest.json").read_text())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_cli_copy_resumes_to_an_equal_copy(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _source(tmp_path / "source")
    target = tmp_path / "copy"
    command = ["copy", source, str(target), "--backend", backend, "-q"]
    with child(CHILD_CLI, *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        _kill_after(process, 12, signal.SIGKILL)
    _marked_count(target, "copy", ONGOING)
    with pytest.raises(DatasetStateError, match=r"episodata copy --resume"):
        Dataset.open(target)
    assert main([*command, "--resume"]) == 0
    assert_dataset(Dataset.open(target, read_only=True), TOTAL, ongoing=ONGOING)
    # a finished copy has nothing to resume
    assert main([*command, "--resume"]) == 1
    assert "nothing to resume" in capsys.readouterr().err


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_ctrl_c_during_cli_copy_leaves_it_marked_and_a_rerun_replaces_it(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _source(tmp_path / "source")
    target = tmp_path / "copy"
    command = ["copy", source, str(target), "--backend", backend, "-q"]
    with child(CHILD_CLI, *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        _kill_after(process, 12, signal.SIGINT)
        err = process.stderr.read() if process.stderr is not None else ""
    assert process.returncode == 130, err
    assert err.strip() == "episodata: interrupted"  # one line, no traceback
    _marked_count(target, "copy", ONGOING)
    assert main(command) == 0  # the same command again replaces the interrupted copy
    assert_dataset(Dataset.open(target, read_only=True), TOTAL, ongoing=ONGOING)


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_to_resume_checks_what_it_keeps(backend: str, tmp_path: Path) -> None:
    source = Dataset.open(_source(tmp_path / "source"), read_only=True)
    target = tmp_path / "copy"
    with child(
        CHILD_CLI,
        "copy",
        str(source.location),
        str(target),
        "--backend",
        backend,
        "-q",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        _kill_after(process, 12, signal.SIGKILL)
    other = "npz_directory" if backend == "zarr" else "zarr"
    with pytest.raises(DatasetStateError, match=rf"its backend is '{backend}', not '{other}'"):
        source.copy_to(target, backend=other, resume=True)
    shorter = Dataset.from_episodes([episode(0)], SCHEMA, str(tmp_path / "short"))
    with pytest.raises(DatasetStateError, match=r"holds \d+ episodes, the source only 1"):
        shorter.copy_to(target, resume=True)
    shorter.close()
    copy = source.copy_to(target, resume=True)
    assert_dataset(copy, TOTAL, ongoing=ONGOING)
    copy.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bad_episode_mid_stream_leaves_nothing_and_the_retry_works(
    backend: str, tmp_path: Path
) -> None:
    def with_bad(bad: int) -> Iterator[dict[str, object]]:
        for i in range(TOTAL):
            value = episode(i)
            if i == bad:
                value["actions"] = value["actions"][:-1]  # one action short
            yield value

    path = tmp_path / "new" / "ds"
    with pytest.raises(SchemaError, match="episode 25") as caught:
        Dataset.from_episodes(with_bad(25), SCHEMA, str(path), backend=backend)
    assert "nothing was kept" in "".join(caught.value.__notes__)
    assert not (tmp_path / "new").exists()  # the folders this call made are gone too
    existing = tmp_path / "empty"
    existing.mkdir()
    with pytest.raises(SchemaError, match="episode 3"):
        Dataset.from_episodes(with_bad(3), SCHEMA, str(existing), backend=backend)
    assert list(existing.iterdir()) == []  # the folder was there before: it stays, empty
    for retry in (path, existing):
        done = Dataset.from_episodes(
            (episode(i) for i in range(TOTAL)), SCHEMA, str(retry), backend=backend
        )
        assert_dataset(done, TOTAL)
        done.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bad_first_episode_creates_nothing(backend: str, tmp_path: Path) -> None:
    bad = episode(0)
    bad["observations"] = {"state": observations(0)[1:, :1]}  # wrong shape
    path = tmp_path / "ds"
    with pytest.raises(SchemaError, match="episode 0"):
        Dataset.from_episodes([bad, episode(1)], SCHEMA, str(path), backend=backend)
    assert not path.exists()


# creates a dataset and stops for good just before its manifest is written
CHILD_CREATION = """
import sys, time
from _oracle import SCHEMA
from episodata import Dataset
from episodata_core.hooks import hookimpl, register_hooks

class Stop:
    @hookimpl
    def before_manifest_written(self, dataset, manifest):
        print("ready", flush=True)
        time.sleep(600)

register_hooks(Stop())
Dataset.create(SCHEMA, sys.argv[1], backend=sys.argv[2])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_create_takes_over_a_killed_creation(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "ds"
    with child(CHILD_CREATION, str(path), backend, stdout=subprocess.PIPE) as process:
        assert next(_lines(process)) == "ready"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    assert len(list(path.iterdir())) > 2  # the backend's files, the lock, the marker
    with pytest.raises(DatasetStateError, match="interrupted before its manifest"):
        Dataset.open(path)
    dataset = Dataset.create(SCHEMA, str(path), backend=backend)
    dataset.add_episode(episode(0))
    dataset.close()
    assert_dataset(Dataset.open(path, read_only=True), 1)
    assert not (path / ".episodata-creating").exists()


def test_create_refuses_folders_that_are_not_ours(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DatasetStateError, match="already holds files"):
        Dataset.create(SCHEMA, str(foreign))
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    # a dataset that lost its manifest is damaged, not an unfinished creation
    damaged = tmp_path / "damaged"
    Dataset.from_episodes([episode(0)], SCHEMA, str(damaged)).close()
    (damaged / "manifest.json").unlink()
    before = sorted(p.name for p in damaged.iterdir())
    with pytest.raises(DatasetStateError, match="already holds files"):
        Dataset.create(SCHEMA, str(damaged))
    with pytest.raises(DatasetStateError, match="not an episodata dataset"):
        Dataset.open(damaged)
    assert sorted(p.name for p in damaged.iterdir()) == before


def test_a_complete_manifest_is_the_format_older_readers_know(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    Dataset.from_episodes([episode(0)], SCHEMA, str(path)).close()
    document = json.loads((path / "manifest.json").read_text())
    assert document["format_version"] == 1
    # format_generation names the layout (issue 15); 'incomplete' is gone once complete
    assert sorted(document) == [
        "backend",
        "backend_options",
        "format_generation",
        "format_version",
        "metadata",
        "provenance",
        "schema",
    ]


def test_memory_bulk_writes_are_unmarked() -> None:
    dataset = Dataset.from_episodes(episode(i) for i in range(3))
    assert dataset.manifest.incomplete is None
    copy = dataset.copy_to(None)
    assert copy.manifest.incomplete is None
    assert_dataset(copy, 3)
    assert np.array_equal(copy.episode(2).read().buffers["observation/state"], observations(2))
    assert os.getpid() > 0


class StopOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stop_with: str = "none"


class StoppingImporter:
    """Imports oracle episodes 0..9 and stops after 5 as asked (test only)."""

    name: ClassVar[str] = "test-stopping"
    description: ClassVar[str] = "test importer"
    Options: ClassVar[type[BaseModel]] = StopOptions

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        return SCHEMA

    def import_into(self, source: str, dataset: Dataset, options: StopOptions) -> ImportResult:
        for i in range(10):
            if i == 5 and options.stop_with == "interrupt":
                raise KeyboardInterrupt
            if i == 5 and options.stop_with == "error":
                raise SchemaError("the source is damaged at episode 5")
            dataset.add_episode(episode(i))
        return ImportResult(report=ImportReport(episodes_imported=10), record={})


@pytest.mark.usefixtures("isolated_registry")
def test_an_interrupted_import_is_marked_and_a_failed_one_leaves_nothing(tmp_path: Path) -> None:
    registry.register_importer(StoppingImporter)
    path = tmp_path / "imported"
    with pytest.raises(KeyboardInterrupt):
        import_dataset("test-stopping", "src.bin", path, stop_with="interrupt")
    with pytest.raises(DatasetStateError, match=r"incomplete: import from 'src.bin' .* after 5 "):
        Dataset.open(path)
    with pytest.raises(SchemaError, match="damaged at episode 5"):
        import_dataset("test-stopping", "src.bin", path, stop_with="error")
    # it replaced the incomplete import, then removed its own files; the folder stays
    assert list(path.iterdir()) == []
    dataset, _ = import_dataset("test-stopping", "src.bin", path)
    dataset.close()
    assert_dataset(Dataset.open(path, read_only=True), 10)


def _state_after_kill(path: Path, total: int) -> str:
    """Absent, an unfinished creation, marked incomplete, or complete: never partial."""
    try:
        opened = Dataset.open(path, read_only=True)
    except DatasetStateError as err:
        message = str(err)
    else:
        assert_dataset(opened, total)  # it opens only if every episode is there
        opened.close()
        return "complete"
    state = re.search(
        r"incomplete: from_episodes|interrupted before its manifest|no such folder", message
    )
    assert state is not None, message
    return state.group(0)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_from_episodes_killed_at_random_instants_is_never_partial(
    backend: str, tmp_path: Path
) -> None:
    """Kills anywhere, from the start of the process to after the last commit."""
    rng = np.random.default_rng(12)
    seen: dict[str, int] = {}
    for trial in range(12):
        path = tmp_path / f"trial{trial}"
        process = child(
            CHILD_FROM_EPISODES,
            str(path),
            backend,
            "20",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with process:
            time.sleep(float(rng.uniform(0.3, 2.5)))
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        state = _state_after_kill(path, 20)
        seen[state] = seen.get(state, 0) + 1
        if state != "complete":  # a rerun replaces whatever the kill left
            Dataset.from_episodes(
                (episode(i) for i in range(20)), SCHEMA, str(path), backend=backend
            ).close()
        assert_dataset(Dataset.open(path, read_only=True), 20)
    print(backend, seen)
