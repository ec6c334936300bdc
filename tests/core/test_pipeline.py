"""TOML pipelines: validation with precise locations, runs, provenance and hooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict

from episodata import Dataset, Pipeline, SchemaError
from episodata_core import hooks, registry
from episodata_core.cli import main
from episodata_core.schema import DatasetSchema
from episodata_core.transfer import ImportReport, ImportResult

pytestmark = pytest.mark.usefixtures("isolated_registry")


class NpzOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    episodes: int = 3


class NpzImporter:
    """Test importer: one npz file with an array `obs` [N, 2]; N split into episodes."""

    name: ClassVar[str] = "test-npz"
    description: ClassVar[str] = "test importer"
    Options: ClassVar[type[BaseModel]] = NpzOptions

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        return DatasetSchema.infer(self._episodes(source, options)[0])

    def _episodes(self, source: str, options: Any) -> list[dict[str, Any]]:
        obs = np.load(source, allow_pickle=False)["obs"]
        parts = np.array_split(obs, options.episodes)
        return [
            {
                "initial_observation": part[0],
                "observations": part[1:],
                "actions": np.arange(len(part) - 1, dtype=np.int64),
                "terminated": True,
            }
            for part in parts
        ]

    def import_into(self, source: str, dataset: Dataset, options: BaseModel) -> ImportResult:
        episodes = self._episodes(source, options)
        for episode in episodes:
            dataset.add_episode(episode)
        report = ImportReport(episodes_found=len(episodes), episodes_imported=len(episodes))
        return ImportResult(
            report=report, record={"format": "test-npz", "source": {"file": Path(source).name}}
        )


class CountOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    offset: int = 1
    fail: bool = False


class CountExporter:
    """Test exporter: writes counts.json with each label's episode count."""

    name: ClassVar[str] = "test-count"
    description: ClassVar[str] = "test exporter"
    Options: ClassVar[type[BaseModel]] = CountOptions

    def export(
        self, datasets: dict[str, Dataset], destination: str, options: Any
    ) -> dict[str, int]:
        if options.fail:
            raise SchemaError("test-count: asked to fail")
        counts = {label: ds.num_episodes * options.offset for label, ds in datasets.items()}
        Path(destination).mkdir(parents=True)
        (Path(destination) / "counts.json").write_text(json.dumps(counts))
        return counts


@pytest.fixture
def plugins():
    registry.register_importer(NpzImporter)
    registry.register_exporter(CountExporter)


@pytest.fixture
def source_file(tmp_path):
    path = tmp_path / "source.npz"
    np.savez(path, obs=np.arange(60, dtype=np.float32).reshape(30, 2))
    return path


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


PIPELINE = """
[source]
importer = "test-npz"
path = "source.npz"
options = {{ episodes = 3 }}

[store]
backend = "npz_directory"
path = "stored"

[[exports]]
exporter = "test-count"
path = "counts"
options = {{ offset = {offset} }}
"""


def test_run_imports_stores_exports_and_records_provenance(plugins, source_file, tmp_path):
    pipeline = Pipeline.from_toml(_write(tmp_path, PIPELINE.format(offset=10)))
    result = pipeline.run(progress=False)
    assert result.dataset.num_episodes == 3
    assert json.loads((tmp_path / "counts" / "counts.json").read_text()) == {"stored": 30}
    result.dataset.close()
    stored = Dataset.open(tmp_path / "stored", read_only=True)
    record = stored.manifest.metadata["pipeline"]
    assert record["config_sha256"] == pipeline.config.digest()
    assert record["config"]["exports"][0]["options"] == {"offset": 10}
    assert "episodata-core" in record["plugins"]
    assert stored.manifest.metadata["imports"][0]["format"] == "test-npz"
    # the same file always hashes the same; a different option changes the hash
    again = Pipeline.from_toml(_write(tmp_path, PIPELINE.format(offset=10)))
    other = Pipeline.from_toml(_write(tmp_path, PIPELINE.format(offset=11)))
    assert again.config.digest() == pipeline.config.digest() != other.config.digest()


def test_hooks_fire_in_order(plugins, source_file, tmp_path):
    events: list[str] = []

    class Recorder:
        @hooks.hookimpl
        def on_pipeline_start(self, pipeline):
            events.append("start")

        @hooks.hookimpl
        def after_pipeline_step(self, pipeline, step):
            events.append(step.split(" ")[0])

        @hooks.hookimpl
        def on_pipeline_end(self, pipeline, result):
            events.append("end")

    recorder = hooks.register_hooks(Recorder())
    try:
        Pipeline.from_toml(_write(tmp_path, PIPELINE.format(offset=1))).run(progress=False)
    finally:
        hooks.unregister_hooks(recorder)
    assert events == ["start", "source", "exports[0]", "end"]


def test_failing_step_is_named_and_error_hook_fires(plugins, source_file, tmp_path):
    errors: list[BaseException] = []

    class Recorder:
        @hooks.hookimpl
        def on_pipeline_error(self, pipeline, error):
            errors.append(error)

    text = PIPELINE.format(offset=1).replace("offset = 1", "offset = 1, fail = true")
    recorder = hooks.register_hooks(Recorder())
    try:
        with pytest.raises(SchemaError, match="asked to fail") as info:
            Pipeline.from_toml(_write(tmp_path, text)).run(progress=False)
    finally:
        hooks.unregister_hooks(recorder)
    assert "pipeline step that failed: exports[0] (test-count to" in "\n".join(info.value.__notes__)
    assert len(errors) == 1
    assert not (tmp_path / "counts").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("offset = 1", 'offset = "many"'),
            r"exports\[0\]\.options\.offset: Input should be a valid integer",
        ),
        (
            ("offset = 1", "offset = 1, bogus = 2"),
            r"exports\[0\]\.options\.bogus: unknown option 'bogus' \(valid options: fail, offset\)",
        ),
        (
            ("offset = 1", "ofset = 1"),
            r"unknown option 'ofset'; did you mean 'offset'\? \(valid options: fail, offset\)",
        ),
        (
            ('exporter = "test-count"', 'exporter = "nope"'),
            r"exports\[0\]\.exporter: no exporter named 'nope' \(installed: .*'test-count'",
        ),
        (
            ('importer = "test-npz"', 'importer = "d4rl-typo"'),
            r"source\.importer: no importer named 'd4rl-typo'",
        ),
        (
            ('importer = "test-npz"', 'importer = "os:system"'),
            r"source\.importer: 'os:system' is an import path",
        ),
        (
            ("episodes = 3", 'episodes = "x"'),
            r"source\.options\.episodes: Input should be a valid integer",
        ),
        (
            ('backend = "npz_directory"', 'backend = "nosuch"'),
            r"store\.backend: no backend named 'nosuch'",
        ),
    ],
    ids=[
        "option-type",
        "unknown-option",
        "misspelled-option",
        "unknown-exporter",
        "unknown-importer",
        "import-path",
        "importer-option",
        "unknown-backend",
    ],
)
def test_validate_reports_full_locations(plugins, source_file, tmp_path, edit, message):
    text = PIPELINE.format(offset=1).replace(*edit)
    assert text != PIPELINE.format(offset=1)
    pipeline = Pipeline.from_toml(_write(tmp_path, text))
    with pytest.raises(SchemaError, match=message):
        pipeline.validate()
    assert not (tmp_path / "stored").exists()


def test_well_known_plugin_gets_an_install_hint(hermetic_registry, source_file, tmp_path):
    # discovery sees only an empty folder, so the well-known 'minari' is not installed
    hermetic_registry(tmp_path)
    text = PIPELINE.format(offset=1).replace('importer = "test-npz"', 'importer = "minari"')
    with pytest.raises(SchemaError, match=r'pip install "episodata\[minari\]"'):
        Pipeline.from_toml(_write(tmp_path, text)).validate()


def test_missing_source_section(tmp_path):
    with pytest.raises(SchemaError, match=r"pipeline\.source: Field required"):
        Pipeline.from_toml(_write(tmp_path, '[store]\npath = "x"\n'))


def test_not_toml(tmp_path):
    with pytest.raises(SchemaError, match="not valid TOML"):
        Pipeline.from_toml(_write(tmp_path, "[source\n"))


def test_cli_validate_and_run(plugins, source_file, tmp_path, capsys):
    path = _write(tmp_path, PIPELINE.format(offset=2))
    assert main(["pipeline", "validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "valid (3 steps" in out
    assert not (tmp_path / "stored").exists()
    assert main(["pipeline", "run", str(path), "--quiet"]) == 0
    assert json.loads((tmp_path / "counts" / "counts.json").read_text()) == {"stored": 6}
    bad = _write(tmp_path, PIPELINE.format(offset=2).replace("offset = 2", "offset = []"))
    assert main(["pipeline", "validate", str(bad)]) == 1
    assert "exports[0].options.offset" in capsys.readouterr().err


def test_run_returns_the_import_report(plugins, source_file, tmp_path):
    result = Pipeline.from_toml(_write(tmp_path, PIPELINE.format(offset=1))).run(progress=False)
    assert result.import_report is not None
    assert result.import_report.episodes_imported == 3
    result.dataset.close()


def test_bad_backend_option_is_a_located_schema_error(tmp_path):
    from episodata import DatasetSchema, FieldSpec

    schema = DatasetSchema([FieldSpec("x", shape=(), dtype="float32")])
    with pytest.raises(
        SchemaError, match=r"backend 'npz_directory' option\.bogus: unknown option 'bogus' \(valid"
    ):
        Dataset.create(schema, tmp_path / "d", backend="npz_directory", bogus=1)
    assert not (tmp_path / "d").exists()


MARKER_MODULE = """
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

Path({marker!r}).write_text("imported")  # the side effect a stranger's module could have


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Exporter:
    name = "marker-count"
    description = "writes the episode count"
    Options = Options

    def export(self, datasets, destination, options):
        Path(destination).mkdir(parents=True)
        counts = {{label: ds.num_episodes for label, ds in datasets.items()}}
        (Path(destination) / "counts.json").write_text(json.dumps(counts))
        return counts
"""


@pytest.fixture
def marker_module(tmp_path, monkeypatch):
    """A real module on sys.path whose import writes a marker file; yields (name, marker)."""
    import sys

    name = f"episodata_marker_{tmp_path.name.replace('-', '_')}"
    marker = tmp_path / "imported.marker"
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / f"{name}.py").write_text(MARKER_MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(folder))
    yield name, marker
    sys.modules.pop(name, None)


def _import_path_pipeline(tmp_path: Path, module: str, *, self_opt_in: bool) -> Path:
    text = PIPELINE.format(offset=1).replace(
        'exporter = "test-count"\npath = "counts"\noptions = { offset = 1 }',
        f'exporter = "{module}:Exporter"\npath = "counts"',
    )
    assert f"{module}:Exporter" in text
    if self_opt_in:
        text = "allow_import_paths = true\n" + text
    return _write(tmp_path, text)


def test_a_file_cannot_opt_itself_into_import_paths(
    plugins, source_file, tmp_path, marker_module, capsys
):
    module, marker = marker_module
    path = _import_path_pipeline(tmp_path, module, self_opt_in=True)
    with pytest.raises(
        SchemaError,
        match=r"allow_import_paths is no longer read from a pipeline "
        r"file.*pass --allow-import-paths",
    ):
        Pipeline.from_toml(path).validate()
    for action in ("validate", "run"):
        assert main(["pipeline", action, str(path)]) == 1
        err = capsys.readouterr().err.strip()
        assert "allow_import_paths is no longer read from a pipeline file" in err
        assert "\n" not in err
        assert "Traceback" not in err
    assert not marker.exists()
    assert not (tmp_path / "stored").exists()


def test_import_paths_need_the_callers_flag(plugins, source_file, tmp_path, marker_module, capsys):
    module, marker = marker_module
    path = _import_path_pipeline(tmp_path, module, self_opt_in=False)
    with pytest.raises(
        SchemaError,
        match=rf"exports\[0\]\.exporter: '{module}:Exporter' is an "
        r"import path.*pass --allow-import-paths",
    ):
        Pipeline.from_toml(path).validate()
    for action in ("validate", "run"):
        assert main(["pipeline", action, str(path)]) == 1
        assert "--allow-import-paths" in capsys.readouterr().err
    assert not marker.exists()
    assert not (tmp_path / "stored").exists()
    # the person running it opts in: the module is imported, validation and the run succeed
    assert main(["pipeline", "validate", "--allow-import-paths", str(path)]) == 0
    assert marker.read_text() == "imported"
    assert not (tmp_path / "stored").exists()
    assert main(["pipeline", "run", "--allow-import-paths", "--quiet", str(path)]) == 0
    assert json.loads((tmp_path / "counts" / "counts.json").read_text()) == {"stored": 3}
    # the run's temporary registration is gone again
    with pytest.raises(LookupError):
        registry.get_exporter(f"{module}:Exporter")


def test_import_path_api_argument(plugins, source_file, tmp_path, marker_module):
    module, marker = marker_module
    path = _import_path_pipeline(tmp_path, module, self_opt_in=False)
    pipeline = Pipeline.from_toml(path, allow_import_paths=True)
    assert not marker.exists()  # loading the file imports nothing
    assert pipeline.validate()[-1].endswith(f"with {module}:Exporter")
    assert marker.exists()
    result = pipeline.run(progress=False)
    assert result.export_reports == [{"stored": 3}]
    result.dataset.close()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_validate_refuses_a_missing_source_file(plugins, tmp_path, capsys):
    path = _write(tmp_path, PIPELINE.format(offset=1))  # source.npz was never written
    with pytest.raises(SchemaError, match=r"source\.path: no such file or folder .*source\.npz"):
        Pipeline.from_toml(path).validate()
    assert main(["pipeline", "validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "source.path" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline.toml"]


def test_validate_and_run_refuse_a_store_that_holds_a_dataset(plugins, source_file, tmp_path):
    path = _write(tmp_path, PIPELINE.format(offset=1))
    Pipeline.from_toml(path).run(progress=False).dataset.close()
    before = _snapshot(tmp_path / "stored")
    (tmp_path / "counts").rename(tmp_path / "counts-first")  # only the store is in the way
    with pytest.raises(SchemaError, match=r"store\.path: .*stored' already holds a dataset"):
        Pipeline.from_toml(path).validate()
    with pytest.raises(SchemaError, match=r"store\.path"):
        Pipeline.from_toml(path).run(progress=False)
    assert _snapshot(tmp_path / "stored") == before
    assert not (tmp_path / "counts").exists()  # the run stopped before any step


def test_validate_refuses_an_existing_export_folder(plugins, source_file, tmp_path):
    path = _write(tmp_path, PIPELINE.format(offset=1))
    (tmp_path / "counts").mkdir()
    with pytest.raises(SchemaError, match=r"exports\[0\]\.path: .*counts' already exists"):
        Pipeline.from_toml(path).validate()


def test_a_store_left_incomplete_may_be_replaced(plugins, source_file, tmp_path):
    path = _write(tmp_path, PIPELINE.format(offset=1))
    (tmp_path / "stored").mkdir()
    (tmp_path / "stored" / "manifest.json").write_text(json.dumps({"incomplete": {"by": "x"}}))
    assert len(Pipeline.from_toml(path).validate()) == 3


def test_workdir_resolves_relative_paths_there(plugins, tmp_path, capsys):
    files = tmp_path / "pipelines"
    files.mkdir()
    path = _write(files, PIPELINE.format(offset=1))
    work = tmp_path / "work"
    work.mkdir()
    np.savez(work / "source.npz", obs=np.arange(60, dtype=np.float32).reshape(30, 2))
    with pytest.raises(SchemaError, match=r"source\.path"):
        Pipeline.from_toml(path).validate()  # relative to the file: no source there
    assert main(["pipeline", "run", str(path), "--quiet", "--workdir", str(work)]) == 0
    # nothing is written beside the file
    assert sorted(p.name for p in files.iterdir()) == ["pipeline.toml"]
    assert json.loads((work / "counts" / "counts.json").read_text()) == {"stored": 3}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ('importer = "test-npz"', 'importr = "test-npz"'),
            (
                r"^pipeline\.source: unknown key 'importr'; did you mean 'importer'\? \(valid keys: "
                r"dataset, importer, options, path\); a source is importer = NAME with path = FILE, "
                r"or dataset = PATH$"
            ),
        ),
        (
            ("[store]", "[stor]"),
            (
                r"^pipeline: unknown table 'stor'; did you mean 'store'\? \(valid tables: executor, "
                r"exports, source, store\)$"
            ),
        ),
        (
            ('path = "stored"', 'paht = "stored"'),
            (
                r"^pipeline\.store: unknown key 'paht'; did you mean 'path'\? \(valid keys: backend, "
                r"options, path\)$"
            ),
        ),
        (
            ('exporter = "test-count"', 'exportr = "test-count"'),
            r"^pipeline\.exports\[0\]: unknown key 'exportr'; did you mean 'exporter'\?",
        ),
    ],
)
def test_a_typo_names_the_key_the_valid_ones_and_the_closest(tmp_path, edit, message):
    path = _write(tmp_path, PIPELINE.format(offset=1).replace(*edit))
    with pytest.raises(SchemaError, match=message) as caught:
        Pipeline.from_toml(path)
    text = str(caught.value)
    assert "ImportSource" not in text  # no internal class names
    assert "DatasetSource" not in text
    assert "Extra inputs" not in text


def test_a_store_without_a_path_records_the_memory_backend_it_used(plugins, source_file, tmp_path):
    # [store] without path= keeps the dataset in memory, so its provenance names the
    # memory backend's distribution; the runner once named zarr's, the default for a path
    text = '[source]\nimporter = "test-npz"\npath = "source.npz"\n\n[store]\n'
    result = Pipeline.from_toml(_write(tmp_path, text)).run(progress=False)
    assert result.dataset.location is None
    assert result.dataset.manifest.backend == "memory"
    plugins_recorded = result.dataset.manifest.metadata["pipeline"]["plugins"]
    assert "episodata-memory" in plugins_recorded
    assert "episodata-zarr" not in plugins_recorded
