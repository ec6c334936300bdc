"""episodata-report: the HTML page, its images, the no-matplotlib path, a real browser, the CLI."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from episodata import Dataset, DatasetSchema, FieldSpec
from episodata_core import registry
from episodata_core.cli import main
from episodata_report import SECTIONS, render_report

SECTION_IDS = [section_id for section_id, _ in SECTIONS]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

SCHEMA = DatasetSchema(
    [
        FieldSpec("pixels", shape=(24, 32, 3), dtype="uint8", layout="HWC", low=0, high=255),
        FieldSpec("depth", shape=(1, 16, 16), dtype="float32", layout="CHW", low=0.0, high=1.0),
        FieldSpec("state", shape=(4,), dtype="float32", description="<b>pose</b> & speed"),
        FieldSpec("move", shape=(2,), dtype="float32", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)
LENGTHS = [12, 20, 7, 30, 3, 16]
FLAGS = [(True, False), (False, True), (True, True), (False, True), (True, False), (True, False)]


def frame(t: int) -> tuple[np.ndarray, np.ndarray]:
    """A red square moving right on a blue-green gradient, and a depth ramp."""
    pixels = np.zeros((24, 32, 3), dtype=np.uint8)
    pixels[..., 1] = np.linspace(0, 200, 32, dtype=np.uint8)[None, :]
    pixels[..., 2] = 120
    x = (2 * t) % 26
    pixels[8:16, x : x + 6] = (230, 30, 30)
    depth = np.broadcast_to(np.linspace(0, 1, 16, dtype=np.float32), (1, 16, 16)).copy()
    depth[0, :, (t % 16)] = 1.0
    return pixels, depth


def episode(index: int, steps: int, rng: np.random.Generator) -> dict[str, Any]:
    frames = [frame(t) for t in range(steps + 1)]
    state = rng.normal(size=(steps + 1, 4)).astype(np.float32)
    state[::5, 3] = np.nan
    terminated, truncated = FLAGS[index]
    return {
        "initial_observation": {"pixels": frames[0][0], "depth": frames[0][1], "state": state[0]},
        "observations": {
            "pixels": np.stack([f[0] for f in frames[1:]]),
            "depth": np.stack([f[1] for f in frames[1:]]),
            "state": state[1:],
        },
        "actions": {"move": rng.uniform(-1, 1, size=(steps, 2)).astype(np.float32)},
        "rewards": rng.uniform(0, 1, size=steps).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated,
    }


def episodes() -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    return [episode(i, n, rng) for i, n in enumerate(LENGTHS)]


def build(backend: str, tmp_path: Path) -> Dataset:
    """Six finalized episodes and one ongoing; stored ones are reopened read-only."""
    path = None if backend == "memory" else str(tmp_path / "stored")
    dataset = Dataset.from_episodes(episodes(), SCHEMA, path, backend=backend)
    pixels, depth = frame(0)
    writer = dataset.new_episode({"pixels": pixels, "depth": depth, "state": np.zeros(4)})
    writer.add_step(
        {
            "observation": {"pixels": pixels, "depth": depth, "state": np.ones(4)},
            "action": {"move": np.zeros(2)},
            "reward": 0.5,
        }
    )
    if path is None:
        return dataset
    dataset.close()
    return Dataset.open(path, read_only=True)


BACKENDS = {info.name for info in registry.list_plugins("backend")}


@pytest.fixture(
    params=[
        "memory",
        pytest.param(
            "npz_directory",
            marks=pytest.mark.skipif(
                "npz_directory" not in BACKENDS, reason="the npz_directory backend is absent"
            ),
        ),
    ]
)
def dataset(request, tmp_path):
    built = build(request.param, tmp_path)
    yield built
    built.close()


class Page(HTMLParser):
    """The parts of the page the tests look at."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.images: list[dict[str, str]] = []
        self.text: dict[str, list[str]] = {}
        self.rows: dict[str, list[list[str]]] = {}
        self.tags: dict[str, list[str]] = {}
        self._section: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {key: value or "" for key, value in attrs}
        if tag == "section":
            self._section = values.get("id", "")
            self.ids.append(self._section)
        if self._section is None:
            return
        self.tags.setdefault(self._section, []).append(tag)
        if tag == "img":
            self.images.append({**values, "section": self._section})
        elif tag == "tr":
            self.rows.setdefault(self._section, []).append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._section:
            self.rows[self._section][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "section":
            self._section = None

    def handle_data(self, data: str) -> None:
        if self._section is not None:
            self.text.setdefault(self._section, []).append(data)
            if self._cell is not None:
                self._cell.append(data)

    def section_text(self, section_id: str) -> str:
        return " ".join(" ".join(self.text.get(section_id, [])).split())


def png_bytes(image: dict[str, str]) -> bytes:
    prefix = "data:image/png;base64,"
    assert image["src"].startswith(prefix)
    return base64.b64decode(image["src"][len(prefix) :], validate=True)


def decode_png(data: bytes) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(data), format="png")


# -- the page --------------------------------------------------------------------------------


def test_report_has_every_section_and_the_counts(dataset, tmp_path):
    output = render_report(dataset, tmp_path / "out" / "report.html")
    assert output == tmp_path / "out" / "report.html"
    page = Page(output.read_text(encoding="utf-8"))
    assert page.ids == SECTION_IDS
    summary = dict(row for row in page.rows["summary"] if len(row) == 2)
    assert summary["episodes"] == "7 (6 finalized)"
    assert summary["terminated"] == "4"  # both flags count as terminated
    assert summary["truncated"].startswith("2")
    assert summary["ongoing"] == "1"
    assert summary["transitions (steps)"] == str(sum(LENGTHS) + 1)
    assert "min 1" in page.section_text("episode-lengths")
    assert "max 30" in page.section_text("episode-lengths")
    assert "reward/reward" in page.section_text("returns")


def _image(page: Page, alt: str) -> np.ndarray:
    (image,) = [image for image in page.images if image["alt"] == alt]
    return decode_png(png_bytes(image))


def test_images_are_embedded_pngs_and_the_page_is_one_file(dataset, tmp_path):
    output = render_report(dataset, tmp_path / "report.html", episodes_for_frames=2)
    page = Page(output.read_text(encoding="utf-8"))
    by_section: dict[str, int] = {}
    for image in page.images:
        data = png_bytes(image)
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 100
        pixels = decode_png(data)
        assert pixels.shape[0] > 0
        assert pixels.shape[1] > 0
        assert image["alt"]
        by_section[image["section"]] = by_section.get(image["section"], 0) + 1
    # two histograms, one reward curve, one per-dimension plot per small numeric field
    # (state, move, reward; the image fields have none), two episodes of two image fields
    assert by_section == {
        "episode-lengths": 1,
        "returns": 1,
        "rewards": 1,
        "distributions": 3,
        "frames": 4,
    }
    # nothing beside the page (the npz dataset itself lives in tmp_path/stored)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "stored") == ["report.html"]


def test_frames_show_hwc_and_chw_fields_upright(tmp_path):
    dataset = build("memory", tmp_path)
    page = Page(render_report(dataset, tmp_path / "r.html", episodes_for_frames=1).read_text())
    pixels = _image(page, "frames of observation/pixels, episode 0")
    # 24x32 frames are enlarged twice; the first one is the reset observation
    first = np.round(pixels[:48:2, :64:2, :3] * 255).astype(np.uint8)
    np.testing.assert_array_equal(first, frame(0)[0])
    assert pixels.shape[1] == 8 * 64 + 7 * 4  # eight frames with gaps
    depth = _image(page, "frames of observation/depth, episode 0")
    grey = np.round(depth[:48:3, :48:3, 0] * 255)
    np.testing.assert_array_equal(grey, np.round(frame(0)[1][0] * 255))


def test_statistics_table_uses_dataset_stats(dataset, tmp_path):
    page = Page(render_report(dataset, tmp_path / "r.html").read_text(encoding="utf-8"))
    header, *rows = page.rows["field-stats"]
    assert header == ["field", "dtype", "shape", "values", "NaN", "min", "max", "mean", "std"]
    table = {row[0]: row for row in rows if len(row) == len(header)}
    stats = dataset.stats()
    for key in ("observation/state", "action/move", "reward/reward", "observation/pixels"):
        summary = stats[key].reduce()
        row = table[key]
        assert row[3] == str(int(summary.total))
        assert row[4] == str(int(summary.nan_count))
        assert float(row[7]) == pytest.approx(float(summary.mean), rel=1e-5)
        assert float(row[8]) == pytest.approx(float(summary.std), rel=1e-5)
    assert int(table["observation/state"][4]) > 0  # the NaNs are counted
    assert table["reward/reward"][3] == str(sum(LENGTHS) + 1)  # steps, not T + 1 rows
    assert "observation/pixels per channel" in page.section_text("field-stats")
    assert "observation/state per element" in page.section_text("field-stats")


def test_text_from_the_dataset_is_escaped(tmp_path):
    dataset = build("memory", tmp_path)
    page = Page(render_report(dataset, tmp_path / "r.html").read_text(encoding="utf-8"))
    assert "<b>pose</b> & speed" in page.section_text("schema")
    assert "b" not in page.tags["schema"]


def test_an_empty_dataset_still_has_every_section(tmp_path):
    page = Page(
        render_report(Dataset.create(SCHEMA), tmp_path / "e.html").read_text(encoding="utf-8")
    )
    assert page.ids == SECTION_IDS
    assert "No episodes." in page.section_text("episode-lengths")
    assert page.images == []


def test_negative_frame_episodes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="episodes_for_frames must be 0 or more"):
        render_report(Dataset.create(SCHEMA), tmp_path / "e.html", episodes_for_frames=-1)


@pytest.mark.skipif("npz_directory" not in BACKENDS, reason="the npz_directory backend is absent")
def test_a_read_only_dataset_is_left_untouched(tmp_path):
    dataset = build("npz_directory", tmp_path)
    manifest = tmp_path / "stored" / "manifest.json"
    before = manifest.read_bytes()
    page = Page(render_report(dataset, tmp_path / "r.html").read_text(encoding="utf-8"))
    dataset.close()
    assert manifest.read_bytes() == before
    assert "opened read-only" in page.section_text("field-stats")


# -- without matplotlib -------------------------------------------------------------------

NO_MATPLOTLIB = textwrap.dedent(
    """
    import json, sys
    sys.modules["matplotlib"] = None  # as if the plots extra were not installed
    sys.path.insert(0, {tests!r})
    import test_html_report
    from episodata_report import render_report

    dataset = test_html_report.build("memory", None)
    output = render_report(dataset, {output!r})
    print(json.dumps({{"html": output.read_text(encoding="utf-8")}}))
    """
)


def run_python(code: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_without_matplotlib_the_report_has_tables_and_says_how_to_get_plots(tmp_path):
    output = str(tmp_path / "plain.html")
    html = run_python(NO_MATPLOTLIB.format(tests=str(Path(__file__).parent), output=output))["html"]
    page = Page(html)
    assert page.ids == SECTION_IDS
    assert 'pip install "episodata[report]"' in page.section_text("episode-lengths")
    assert 'pip install "episodata[report]"' in page.section_text("returns")
    assert {image["section"] for image in page.images} == {"frames"}  # frames need no plots
    header = page.rows["episode-lengths"][0]
    assert header == ["transitions", "episodes"]
    assert sum(int(row[1]) for row in page.rows["episode-lengths"][1:]) == len(LENGTHS) + 1
    assert page.rows["field-stats"][0][0] == "field"


def test_importing_the_plugin_loads_no_matplotlib():
    probe = (
        "import json, sys; import episodata_report; "
        "print(json.dumps({'loaded': 'matplotlib' in sys.modules}))"
    )
    assert run_python(probe) == {"loaded": False}


# -- in a real browser ----------------------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="chromium is not on PATH (.ci/run installs Debian's chromium package)",
)
def test_headless_chromium_renders_the_page(tmp_path):
    output = render_report(build("memory", tmp_path), tmp_path / "report.html")
    screenshot = tmp_path / "screenshot.png"

    def chromium(*args: str) -> subprocess.CompletedProcess[str]:
        profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
        return subprocess.run(
            ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=90,
        )

    shot = chromium(
        f"--screenshot={screenshot}", "--window-size=1200,2000", output.resolve().as_uri()
    )
    assert screenshot.is_file(), shot.stderr
    pixels = decode_png(screenshot.read_bytes())
    assert pixels.shape[:2] == (2000, 1200)
    colors = np.unique(np.round(pixels[..., :3] * 255).reshape(-1, 3), axis=0)
    assert len(colors) > 50  # text, plots and frames, not a blank page
    assert pixels[..., :3].std() > 0.05
    dom = chromium("--dump-dom", output.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr
    rendered = Page(dom.stdout)
    assert rendered.ids == SECTION_IDS
    assert len(rendered.images) == 2 + 1 + 3 + 2 * 3


# -- the command line -----------------------------------------------------------------------


@pytest.fixture
def stored(tmp_path):
    if "npz_directory" not in BACKENDS:
        pytest.skip("the npz_directory backend is absent")
    build("npz_directory", tmp_path).close()
    return tmp_path / "stored"


def test_cli_report_writes_next_to_the_working_directory(stored, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["report", str(stored), "--frame-episodes", "1"]) == 0
    assert capsys.readouterr().out.strip() == "wrote stored-report.html"
    page = Page((work / "stored-report.html").read_text(encoding="utf-8"))
    assert page.ids == SECTION_IDS
    assert sorted(p.name for p in work.iterdir()) == ["stored-report.html"]  # one file
    assert not (stored / "report.html").exists()
    assert main(["report", str(stored), "-o", str(tmp_path / "elsewhere" / "r.html")]) == 0
    assert "elsewhere" in capsys.readouterr().out
    assert (tmp_path / "elsewhere" / "r.html").is_file()


def test_cli_report_without_the_distribution_names_the_extra(stored, hermetic_registry, capsys):
    # discovery sees no distribution at all: `report` is no verb, and says where it lives
    assert main(["report", str(stored)]) == 2
    assert capsys.readouterr().err == (
        "episodata: error: no command named 'report': it ships in episodata-report: "
        'pip install "episodata[report]"\n'
    )


def test_cli_report_of_a_missing_dataset_fails_in_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("episodata: error: cannot open")
    assert err.count("\n") == 1


def test_cli_report_help(capsys):
    assert main(["report", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: episodata report")
