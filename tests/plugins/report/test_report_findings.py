"""The report's data checks, reward curves, samples and provenance, against brute force."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from test_html_report import Page

from episodata import Dataset, DatasetSchema, FieldSpec, import_dataset
from episodata_report import render_report
from episodata_report._collect import collect
from episodata_report._plots import length_histogram, log_scale

SCHEMA = DatasetSchema(
    [
        FieldSpec("pos", shape=(3,), dtype="float32", low=-1.0, high=1.0),
        FieldSpec("still", shape=(2,), dtype="float32"),
        FieldSpec("clean", shape=(), dtype="float64"),
        FieldSpec("push", shape=(2,), dtype="float32", role="action", low=-1.0, high=1.0),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)
LENGTHS = [5, 9, 2, 7]


def _episodes() -> list[dict[str, Any]]:
    rng = np.random.default_rng(3)
    episodes = []
    for number, n in enumerate(LENGTHS):
        pos = rng.uniform(-0.9, 0.9, size=(n + 1, 3)).astype(np.float32)
        pos[1, 0] = np.inf
        pos[2, 1] = np.nan
        if number % 2:
            pos[3 % (n + 1), 2] = 1.5  # above the high bound
        push = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
        push[0, 0] = -3.0  # below the low bound
        episodes.append(
            {
                "initial_observation": {
                    "pos": pos[0],
                    "still": np.array([2.0, 2.0], np.float32),
                    "clean": 0.0,
                },
                "observations": {
                    "pos": pos[1:],
                    "still": np.full((n, 2), 2.0, np.float32),
                    "clean": rng.normal(size=n),
                },
                "actions": {"push": push},
                "rewards": rng.normal(size=n).astype(np.float32),
                "terminated": True,
            }
        )
    return episodes


@pytest.fixture
def dataset():
    episodes = _episodes()
    built = Dataset.from_episodes(episodes, SCHEMA)
    yield built, episodes
    built.close()


def _obs(episode: dict[str, Any], key: str) -> np.ndarray:
    first = np.asarray(episode["initial_observation"][key])[None]
    return np.concatenate([first, np.asarray(episode["observations"][key])])


def test_findings_count_what_brute_force_counts(dataset):
    built, episodes = dataset
    findings = {(f.field, f.kind): f for f in collect(built, episodes_for_frames=0).findings}
    pos = np.concatenate([_obs(e, "pos") for e in episodes]).astype(np.float64)
    push = np.concatenate([e["actions"]["push"] for e in episodes]).astype(np.float64)
    assert findings["observation/pos", "nan"].count == np.isnan(pos).sum()
    assert findings["observation/pos", "inf"].count == np.isinf(pos).sum()
    # infinities are counted as infinite, not again as out of bounds
    above = np.count_nonzero(np.isfinite(pos) & (pos > 1.0))
    assert findings["observation/pos", "above-high"].count == above == 2
    assert findings["action/push", "below-low"].count == np.count_nonzero(push < -1.0)
    assert findings["observation/pos", "nan"].of == pos.size
    assert findings["observation/still", "constant"].count == 2
    assert "every value is 2" in findings["observation/still", "constant"].detail
    # a clean field has no finding; a NaN is not an out-of-bounds value
    assert not [key for key in findings if key[0] == "observation/clean"]
    assert ("observation/pos", "below-low") not in findings


def test_reward_curve_is_the_mean_min_and_max_by_step(dataset):
    built, episodes = dataset
    curve = collect(built, episodes_for_frames=0).reward_curves["reward/reward"]
    longest = max(LENGTHS)
    for step in range(longest):
        values = [float(e["rewards"][step]) for e in episodes if len(e["rewards"]) > step]
        assert curve.episodes[step] == len(values)
        assert curve.mean[step] == pytest.approx(np.mean(values), rel=1e-6)
        assert curve.low[step] == pytest.approx(min(values), rel=1e-6)
        assert curve.high[step] == pytest.approx(max(values), rel=1e-6)


def test_samples_are_values_of_the_dataset(dataset):
    built, episodes = dataset
    samples = collect(built, episodes_for_frames=0).samples
    assert set(samples) == {
        "observation/pos",
        "observation/still",
        "observation/clean",
        "action/push",
        "reward/reward",
    }
    steps = sum(LENGTHS)
    assert samples["observation/pos"].shape == (steps, 3)
    # observations where an action was taken: rows 0..T-1 of each episode
    taken = {tuple(row) for e in episodes for row in _obs(e, "pos")[:-1].astype(np.float64)}
    for row in samples["observation/pos"]:
        assert tuple(row) in taken or np.isnan(row).any()
    actions = {tuple(row) for e in episodes for row in e["actions"]["push"].astype(np.float64)}
    assert all(tuple(row) in actions for row in samples["action/push"])


def test_page_lists_the_findings_and_says_so_when_clean(dataset, tmp_path):
    built, _ = dataset
    page = Page(render_report(built, tmp_path / "r.html").read_text(encoding="utf-8"))
    rows = page.rows["data-checks"]
    assert rows[0] == ["field", "check", "what", "count", "share"]
    assert {(row[0], row[1]) for row in rows[1:]} >= {
        ("observation/pos", "NaN"),
        ("observation/pos", "infinite"),
        ("observation/pos", "above bound"),
        ("action/push", "below bound"),
        ("observation/still", "constant"),
    }
    rng = np.random.default_rng(0)
    clean = Dataset.from_episodes(
        [
            {
                "initial_observation": rng.normal(size=2),
                "observations": rng.normal(size=(6, 2)),
                "actions": rng.normal(size=6),
                "rewards": rng.normal(size=6),
                "terminated": True,
            }
        ]
    )
    page = Page(render_report(clean, tmp_path / "c.html").read_text(encoding="utf-8"))
    assert "No findings in 3 numeric fields" in page.section_text("data-checks")


def test_one_episode_reads_as_a_sentence_not_a_broken_histogram(tmp_path):
    one = Dataset.from_episodes(_episodes()[:1], SCHEMA)
    page = Page(render_report(one, tmp_path / "one.html").read_text(encoding="utf-8"))
    assert "The episode has 5 transitions." in page.section_text("episode-lengths")
    sections = {image["section"] for image in page.images}
    assert "episode-lengths" not in sections
    assert "returns" not in sections


def test_counts_over_orders_of_magnitude_get_a_log_axis():
    assert not log_scale(np.array([1]))
    assert not log_scale(np.array([3, 40, 0, 12]))
    assert log_scale(np.array([1, 5, 100_000]))
    # a million episodes draw in one call (the page of a large dataset stays cheap)
    lengths = np.random.default_rng(0).geometric(1 / 200, size=1_000_000)
    status = np.where(lengths % 3 == 0, "terminated", "truncated")
    assert length_histogram(lengths, status).startswith(b"\x89PNG")


def test_provenance_names_the_importer_and_the_source_file(tmp_path):
    from episodata_d4rl.sample import write_sample

    source = write_sample(tmp_path / "hopper-sample.hdf5", episodes=3)
    imported, _ = import_dataset("d4rl", str(source), str(tmp_path / "hopper"))
    page = Page(render_report(imported, tmp_path / "r.html").read_text(encoding="utf-8"))
    text = page.section_text("provenance")
    assert re.search(r"d4rl importer, file hopper-sample\.hdf5 \(\d+ bytes\)", text)
    assert "episodata-zarr" in text
    assert imported.manifest.provenance.episodata_version in text
    imported.close()
