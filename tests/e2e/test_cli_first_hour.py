"""The first hour on the command line, through real subprocesses of the ``episodata`` command.

Everyday mistakes are one line on stderr with a non-zero exit code and no traceback
(``--debug`` shows it); warnings are printed once; the quick start can be run again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from episodata import Dataset

ROOT = Path(__file__).resolve().parents[2]


def episodata(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "episodata_core.cli", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("episodata: error: ")
    for part in parts:
        assert part in lines[0], lines[0]


def test_the_quick_start_run_again_records_new_episodes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "UV_RUN_RECURSION_DEPTH"}
    first = subprocess.run(
        [sys.executable, "-m", "episodata_core.cli", "quickstart", "--episodes", "3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "(seed 0)" in first.stdout
    assert first.stdout.strip().endswith("next: episodata info quickstart-cartpole")
    # under `uv run` (the README's checkout) the hint says how to reach the command
    again = episodata(
        "quickstart", "--episodes", "3", cwd=tmp_path, env={"UV_RUN_RECURSION_DEPTH": "1"}
    )
    assert again.returncode == 0, again.stderr
    assert "with seed 3, after the 3 episodes already there" in again.stdout
    assert again.stdout.strip().endswith("next: uv run --no-dev episodata info quickstart-cartpole")
    dataset = Dataset.open(tmp_path / "quickstart-cartpole", read_only=True)
    assert dataset.num_episodes == 6
    firsts = [dataset.episode(i).read().all_obs[0] for i in range(6)]
    # six different reset observations: the second run did not repeat the first
    assert len({tuple(np.round(obs, 6)) for obs in firsts}) == 6
    dataset.close()


def test_a_missing_import_source_is_one_line_and_debug_shows_the_traceback(tmp_path):
    result = episodata("import", "d4rl", "hopper-medium-v2.hdf5", "hopper", cwd=tmp_path)
    one_line_error(result, "hopper-medium-v2.hdf5", "no such file")
    assert not (tmp_path / "hopper").exists()
    debug = episodata("--debug", "import", "d4rl", "hopper-medium-v2.hdf5", "hopper", cwd=tmp_path)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "FileNotFoundError" in debug.stderr


def test_the_readme_pipeline_without_its_source_is_one_line(tmp_path):
    shutil.copytree(ROOT / "contrib" / "pipelines", tmp_path / "pipelines")
    result = episodata("pipeline", "run", "pipelines/d4rl-to-segments.toml", cwd=tmp_path)
    one_line_error(result, "source.path: no such file or folder", "hopper-medium-v2.hdf5")


def test_an_unwritable_copy_destination_is_one_line(tmp_path):
    source = tmp_path / "source"
    Dataset.from_episodes(
        [{"initial_observation": np.zeros(2), "observations": np.ones((3, 2)), "terminated": True}],
        path=str(source),
    ).close()
    (tmp_path / "a-file").write_text("not a folder")
    result = episodata("copy", "--quiet", "source", "a-file/copy", cwd=tmp_path)
    one_line_error(result, "a-file")


def test_verify_of_nothing_is_an_error_not_damage(tmp_path):
    result = episodata("verify", "no-such-dataset", cwd=tmp_path)
    one_line_error(result, "no-such-dataset", "no such folder")
    assert "DAMAGED" not in result.stdout + result.stderr


def test_an_import_warning_is_printed_once_without_a_source_line(tmp_path):
    import h5py

    rows = 30
    with h5py.File(tmp_path / "no-timeouts.hdf5", "w") as file:
        file["observations"] = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
        file["actions"] = np.zeros((rows, 1), dtype=np.float32)
        file["rewards"] = np.ones(rows, dtype=np.float32)
        terminals = np.zeros(rows, dtype=bool)
        terminals[9] = True
        file["terminals"] = terminals
    shown = episodata("import", "d4rl", "no-timeouts.hdf5", "shown", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    everything = shown.stdout + shown.stderr
    assert everything.count("has no 'timeouts'") == 1  # in the summary, not again
    assert "sys.exit" not in everything
    quiet = episodata("import", "d4rl", "no-timeouts.hdf5", "quiet", "--quiet", cwd=tmp_path)
    assert quiet.stdout == ""
    lines = quiet.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("episodata: warning: ")
    assert "[no_timeouts]" in lines[0]


def test_counts_are_spelled_in_the_right_number(tmp_path):
    Dataset.from_episodes(
        [{"initial_observation": np.zeros(2), "observations": np.ones((1, 2)), "terminated": True}],
        path=str(tmp_path / "one"),
    ).close()
    copied = episodata("copy", "one", "two", cwd=tmp_path)
    assert "copied 1 episode to two" in copied.stdout
    verified = episodata("verify", "two", cwd=tmp_path)
    assert "checksums of 1 episode" in verified.stdout
    assert "1 episodes" not in copied.stdout + verified.stdout


def on_a_terminal(args: list[str], cwd: Path) -> str:
    """Run the command with stdin, stdout and stderr on a 100-column pseudo-terminal."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    # a pty starts at 0 columns, where tqdm draws nothing
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    with subprocess.Popen(
        [sys.executable, "-m", "episodata_core.cli", *args],
        cwd=cwd,
        stdout=follower,
        stderr=follower,
        stdin=follower,
    ) as process:
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        process.wait(timeout=120)
    os.close(leader)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    return text


def test_copy_and_import_show_progress_on_a_terminal_only(tmp_path):
    from episodata_d4rl.sample import write_sample

    Dataset.from_episodes(
        [
            {
                "initial_observation": np.zeros(2),
                "observations": np.ones((5, 2)),
                "terminated": True,
            }
            for _ in range(4)
        ],
        path=str(tmp_path / "src"),
    ).close()
    write_sample(tmp_path / "sample.hdf5", episodes=5)
    # piped: no bar at all, only the summary
    piped = episodata("copy", "src", "dst-piped", cwd=tmp_path)
    assert "episode/s" not in piped.stderr
    assert "%|" not in piped.stderr
    imported = episodata("import", "d4rl", "sample.hdf5", "imp-piped", cwd=tmp_path)
    assert "episodes/s" not in imported.stderr
    # on a terminal: a bar with the count, and the rate
    copied = on_a_terminal(["copy", "src", "dst"], tmp_path)
    assert "100%" in copied
    assert "4/4" in copied
    assert "MB/s" in copied
    text = on_a_terminal(["import", "d4rl", "sample.hdf5", "imp"], tmp_path)
    assert "importing d4rl: 5 episodes" in text
    assert "episodes/s" in text
    # --quiet: nothing on a terminal either
    assert on_a_terminal(["import", "d4rl", "sample.hdf5", "imp-quiet", "--quiet"], tmp_path) == ""


def test_quickstart_and_report_show_progress_on_a_terminal(tmp_path):
    recorded = on_a_terminal(["quickstart", "--episodes", "3"], tmp_path)
    assert "recording CartPole-v1: 100%" in recorded
    assert "3/3" in recorded
    reported = on_a_terminal(["report", "quickstart-cartpole"], tmp_path)
    assert "reading rewards of episodes: 100%" in reported
    piped = episodata("report", "quickstart-cartpole", "-o", "piped.html", cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert "reading rewards" not in piped.stderr


def test_export_shows_progress_on_a_terminal_and_writes_the_same_archive(tmp_path):
    import hashlib

    from episodata_d4rl.sample import write_sample

    write_sample(tmp_path / "sample.hdf5", episodes=6)
    episodata("import", "d4rl", "sample.hdf5", "hopper", "-q", cwd=tmp_path)
    export = ["export", "offset-segments", "hopper=hopper"]
    options = ["--offset", "5", "--per-env", "4", "--seed", "1"]
    shown = on_a_terminal([*export, "on-terminal", *options], tmp_path)
    assert "hopper: segments: 100%" in shown
    assert "4/4" in shown
    piped = episodata(*export, "piped", *options, cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert "%|" not in piped.stderr

    def segments(name: str) -> dict[str, bytes]:
        folder = tmp_path / name / "episodes"
        return {
            str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).digest()
            for path in sorted(folder.rglob("*.npz"))
        }

    # a bar changes no byte of the segments
    assert segments("on-terminal") == segments("piped")
    assert len(segments("piped")) == 4
