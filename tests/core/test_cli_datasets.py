"""The dataset verbs of the `episodata` command on real stored datasets."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from episodata import Dataset
from episodata_core.cli import main

VERBS = (
    "quickstart",
    "info",
    "verify",
    "copy",
    "import",
    "export",
    "pipeline",
    "report",
    "plugins",
)
BACKEND = "npz_directory"


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(capsys, verb):
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: episodata {verb}")


def test_top_level_help_lists_every_verb(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in VERBS:
        assert re.search(rf"^    {verb}\b", out, re.MULTILINE), verb


def test_quickstart_records_reads_and_samples(tmp_path, capsys):
    path = tmp_path / "cartpole"
    assert main(["quickstart", "--path", str(path), "--backend", BACKEND, "--episodes", "5"]) == 0
    out = capsys.readouterr().out
    assert "recorded 5 CartPole-v1 episodes" in out
    assert "next_obs[t] == obs[t + 1]: True" in out
    assert "batch.obs       float32[64, 32, 4]" in out
    dataset = Dataset.open(path, read_only=True)
    assert dataset.num_episodes == 5
    segment = dataset.episode(0).read()
    assert segment.obs.shape == (len(segment), 4)
    np.testing.assert_array_equal(segment.next_obs[:-1], segment.obs[1:])
    assert segment.terminated[-1] or segment.truncated[-1]
    dataset.close()
    # a second run appends instead of failing on the existing folder
    assert main(["quickstart", "--path", str(path), "--episodes", "2"]) == 0
    assert "appending to the existing dataset" in capsys.readouterr().out
    assert Dataset.open(path, read_only=True).num_episodes == 7


@pytest.fixture
def stored(tmp_path):
    path = tmp_path / "stored"
    rng = np.random.default_rng(0)
    episodes = [
        {
            "initial_observation": rng.normal(size=3).astype(np.float32),
            "observations": rng.normal(size=(n, 3)).astype(np.float32),
            "actions": rng.integers(0, 4, size=n),
            "rewards": rng.normal(size=n).astype(np.float32),
            "terminated": n % 2 == 0,
            "truncated": n % 2 == 1,
        }
        for n in (4, 7, 10)
    ]
    Dataset.from_episodes(episodes, path=path, backend=BACKEND).close()
    return path


def test_info_describes_schema_counts_and_provenance(stored, capsys):
    assert main(["info", str(stored)]) == 0
    out = capsys.readouterr().out
    assert f"backend: {BACKEND} (episodata-npz==" in out
    assert (
        "episodes: 3 (3 finalized: 2 terminated, 1 truncated, 0 both, 0 neither; 0 ongoing)" in out
    )
    assert "steps: 21 transitions (episode length min 4, mean 7.0, max 10)" in out
    assert re.search(r"on disk: [\d.]+ KiB in \d+ files", out)
    assert re.search(r"observation\s+observation\s+float32\s+\[3\]", out)
    assert re.search(r"action\s+action\s+int64\s+\[\]", out)


def test_verify_ok_then_damaged(stored, capsys):
    assert main(["verify", str(stored)]) == 0
    assert capsys.readouterr().out.startswith(f"OK {stored}")
    victim = max((p for p in stored.rglob("*.npz")), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert main(["verify", str(stored)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out
    assert victim.name in out


def test_copy_keeps_every_read(stored, tmp_path, capsys):
    target = tmp_path / "copy"
    assert main(["copy", str(stored), str(target), "--backend", BACKEND, "--quiet"]) == 0
    original = Dataset.open(stored, read_only=True)
    copied = Dataset.open(target, read_only=True)
    assert copied.num_episodes == original.num_episodes
    for a, b in zip(original, copied, strict=True):
        ra, rb = a.read(), b.read()
        for key in ra.buffers:
            np.testing.assert_array_equal(ra.buffers[key], rb.buffers[key])
        assert (a.terminated, a.truncated) == (b.terminated, b.truncated)


def test_errors_are_one_line_with_exit_1(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("episodata: error: cannot open")
    assert err.count("\n") == 1


def test_broken_pipe_is_quiet(stored):
    command = f"{sys.executable} -m episodata_core.cli info {stored} | head -1"
    result = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    assert result.stdout.startswith("dataset:")
    assert "Traceback" not in result.stderr
