"""Several files per pipeline source, and choosing the executor, without starting Ray."""

from __future__ import annotations

import pytest
from tests.fixtures.hdf5_sources import d4rl_tiny

import episodata
from episodata import Dataset
from episodata_core.cli import main
from episodata_core.errors import FormatError, SchemaError
from episodata_core.pipeline import Pipeline, load_config


def _text(path, store) -> str:
    return f'[source]\nimporter = "d4rl"\npath = {path}\n[store]\npath = "{store}"\n'


def test_several_files_equal_one_import_after_another(tmp_path):
    first, oracle_a = d4rl_tiny(tmp_path, case="A")
    second, oracle_b = d4rl_tiny(tmp_path, case="A", timeout_at_3=True)
    result = Pipeline(load_config(_text(f'["{first}", "{second}"]', tmp_path / "p"))).run(
        progress=False
    )
    # the oracle: each file's own episodes, the second after the first
    dataset = result.dataset
    manual, _ = episodata.import_dataset("d4rl", first, tmp_path / "manual")
    episodata.import_dataset("d4rl", second, manual)
    assert dataset.num_episodes == len(oracle_a.episodes) + len(oracle_b.episodes)
    assert dataset.manifest.metadata["imports"] == manual.manifest.metadata["imports"]
    assert result.import_report.episodes_imported == dataset.num_episodes
    dataset.close()
    manual.close()


def test_a_bad_second_file_keeps_nothing(tmp_path):
    first, _ = d4rl_tiny(tmp_path, case="A")
    other, _ = d4rl_tiny(tmp_path, case="B")  # another schema: no next_observations
    pipeline = Pipeline(load_config(_text(f'["{first}", "{other}"]', tmp_path / "p")))
    with pytest.raises(FormatError, match="does not fit the destination's schema"):
        pipeline.run(progress=False)
    assert not (tmp_path / "p").exists()


def test_a_glob_that_matches_nothing_is_a_clear_error(tmp_path):
    pipeline = Pipeline(load_config(_text(f'"{tmp_path}/none-*.hdf5"', tmp_path / "p")))
    with pytest.raises(SchemaError, match=r"source\.path: the glob .* matches no file"):
        pipeline.validate()


def test_cli_chooses_the_executor(tmp_path, capsys):
    source, _ = d4rl_tiny(tmp_path, case="A")
    file = tmp_path / "p.toml"
    file.write_text(_text(f'"{source}"', tmp_path / "out"))
    assert main(["pipeline", "validate", str(file), "--executor", "ray", "--address", "auto"]) == 0
    assert "run on the ray executor" in capsys.readouterr().out
    assert main(["pipeline", "run", str(file), "--executor", "dask"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "no executor named 'dask'" in err[0]
    assert not (tmp_path / "out").exists()
    assert main(["pipeline", "run", str(file), "-q", "--executor", "local"]) == 0
    assert Dataset.open(tmp_path / "out").manifest.metadata["pipeline"]["executor"] == {
        "name": "local"
    }
