"""The exporter's statistics are LeRobot 0.6.1's: its frame sample, its estimator (§8.3).

The default run checks them against brute-force references written from the definition
(exact rationals for the sample, float64 for the moments, exact quantiles); the slow test
against LeRobot's own ``compute_episode_stats`` and ``aggregate_stats`` in its venv.
"""

from __future__ import annotations

import subprocess
import textwrap
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata_lerobot._stats import aggregate, episode_stats

if TYPE_CHECKING:
    from pathlib import Path


def _reference_frames(length: int) -> list[int]:
    """The sampled frames: evenly spaced over 0..T-1, rounded half to even."""
    count = length if length < 100 else max(100, min(int(length**0.75), 10_000))
    if count == 1:
        return [0]
    return [round(Fraction(i * (length - 1), count - 1)) for i in range(count)]


def _reference_pixels(frames: np.ndarray) -> np.ndarray:
    """``[pixels, 3]`` float64 levels of the sampled, downsampled RGB frames."""
    height, width = frames.shape[1:3]
    step = 1
    if max(height, width) >= 300:
        step = max(height, width) // 150
    rows, columns = range(0, height, step), range(0, width, step)
    pixels = [
        frames[t][r][c] for t in _reference_frames(len(frames)) for r in rows for c in columns
    ]
    levels = np.asarray(pixels, dtype=np.float64)
    if levels.shape[1] == 1:
        levels = np.repeat(levels, 3, axis=1)
    return levels[:, :3]


def _check_image(frames: np.ndarray, std_rtol: float) -> dict[str, np.ndarray]:
    ours = episode_stats(frames, image=True)
    levels = _reference_pixels(frames)
    assert int(ours["count"][0]) == len(_reference_frames(len(frames)))
    assert {k: v.shape for k, v in ours.items() if k != "count"} == dict.fromkeys(
        ("min", "max", "mean", "std", "q01", "q10", "q50", "q90", "q99"), (3, 1, 1)
    )
    # levels / 255 in float32, as LeRobot divides them
    np.testing.assert_allclose(ours["min"].ravel(), levels.min(axis=0) / 255, rtol=1e-7)
    np.testing.assert_allclose(ours["max"].ravel(), levels.max(axis=0) / 255, rtol=1e-7)
    np.testing.assert_allclose(ours["mean"].ravel(), levels.mean(axis=0) / 255, rtol=1e-5)
    np.testing.assert_allclose(ours["std"].ravel(), levels.std(axis=0) / 255, rtol=std_rtol)
    # a histogram quantile lies in the bin of the exact one (levels are whole numbers;
    # the bin edges are float32)
    width = (levels.max(axis=0) - levels.min(axis=0)) / 5000 / 255
    for name, q in (("q01", 0.01), ("q10", 0.1), ("q50", 0.5), ("q90", 0.9), ("q99", 0.99)):
        exact = np.quantile(levels, q, axis=0, method="inverted_cdf") / 255
        assert np.all(np.abs(ours[name].ravel() - exact) <= width * 1.001 + 1e-9), name
    return ours


def _frames(length: int, height: int, width: int, channels: int, seed: int) -> np.ndarray:
    """Frames of a random brightness each: a sample of them is not all of them."""
    rng = np.random.default_rng(seed)
    brightness = rng.integers(0, 200, size=(length, 1, 1, 1))
    noise = rng.integers(0, 56, size=(length, height, width, channels))
    return (brightness + noise).astype(np.uint8)


def test_long_episodes_describe_a_sample_of_their_frames() -> None:
    # 300 frames: LeRobot describes 100 of them (and says count 100)
    frames = _frames(300, 12, 10, 3, seed=1)
    ours = _check_image(frames, std_rtol=1e-3)
    assert int(ours["count"][0]) == 100
    every = frames.reshape(-1, 3).astype(np.float64)
    # the sample's std is not the std over every frame
    assert np.abs(ours["std"].ravel() / (every.std(axis=0) / 255) - 1).min() > 1e-2


@pytest.mark.parametrize(("height", "width"), [(300, 320), (451, 200), (299, 299)])
def test_large_frames_are_downsampled_first(height: int, width: int) -> None:
    rng = np.random.default_rng(height)
    frames = rng.integers(0, 256, size=(3, height, width, 3), dtype=np.uint8)
    frames[:, ::2] //= 3  # even rows darker: a stride-2 sample sees only those
    _check_image(frames, std_rtol=1e-3)


@pytest.mark.parametrize("channels", [1, 4])
def test_grey_and_rgba_frames_are_described_as_rgb(channels: int) -> None:
    _check_image(_frames(120, 6, 5, channels, seed=channels), std_rtol=1e-3)


def test_lerobots_estimator_not_a_two_pass_std() -> None:
    # a nearly white image: mean(x**2) - mean**2 in float32 cancels; LeRobot keeps that
    frames = np.full((40, 32, 32, 3), 255, dtype=np.uint8)
    frames[:, 10:14, 10:14] = 0
    levels = frames.reshape(-1, 3).astype(np.float32)
    mean = np.mean(levels, axis=0)
    float32_estimate = np.sqrt(np.mean(levels**2, axis=0) - mean**2) / 255
    ours = episode_stats(frames, image=True)
    np.testing.assert_array_equal(ours["std"].ravel(), float32_estimate.astype(np.float32))


def test_vectors_promote_like_lerobot_and_single_frames_use_the_mean() -> None:
    rng = np.random.default_rng(2)
    ints = rng.integers(-5, 9, size=(50, 2))
    stats = episode_stats(ints, image=False)
    assert stats["mean"].dtype == np.float64
    assert stats["min"].dtype == np.float64
    np.testing.assert_allclose(stats["mean"], ints.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats["std"], ints.std(axis=0), rtol=1e-9)
    flags = episode_stats(np.arange(7) == 6, image=False)
    assert flags["mean"].dtype == np.float32
    assert flags["mean"].shape == (1,)
    np.testing.assert_allclose(flags["mean"], [1 / 7], rtol=1e-6)
    one = episode_stats(np.asarray([[1.5, -2.0]], dtype=np.float32), image=False)
    for name in ("q01", "q50", "q99", "mean"):
        np.testing.assert_array_equal(one[name], [1.5, -2.0])
    np.testing.assert_array_equal(one["std"], [0, 0])


def test_the_dataset_statistics_pool_the_episodes() -> None:
    rng = np.random.default_rng(4)
    episodes = [rng.normal(3, 2, size=(n, 2)) for n in (5, 17, 1, 40)]
    total = aggregate([episode_stats(e, image=False) for e in episodes])
    every = np.concatenate(episodes)
    np.testing.assert_allclose(total["mean"], every.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(total["std"], every.std(axis=0), rtol=1e-9)
    np.testing.assert_array_equal(total["min"], every.min(axis=0))
    np.testing.assert_array_equal(total["max"], every.max(axis=0))
    assert total["count"].tolist() == [63]


# LeRobot's own functions on the same episodes; images go through PNG files as in its writer
LEROBOT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from pathlib import Path
    from PIL import Image
    from lerobot.datasets.compute_stats import aggregate_stats, compute_episode_stats

    source = np.load(sys.argv[1])
    folder = Path(sys.argv[2])
    names = sorted({key.split("/")[1] for key in source.files})
    count = len({key.split("/")[0] for key in source.files})
    out, total = {}, None
    features = {}
    for e in range(count):
        data = {}
        for name in names:
            values = source[f"{e}/{name}"]
            if name.startswith("observation.image"):
                paths = []
                mode = {1: "L", 3: "RGB", 4: "RGBA"}[values.shape[3]]
                for t, frame in enumerate(values):
                    path = folder / f"{e}-{name}-{t}.png"
                    Image.fromarray(frame[..., 0] if mode == "L" else frame, mode=mode).save(path)
                    paths.append(str(path))
                data[name] = paths
                features[name] = {"dtype": "image"}
            else:
                data[name] = values
                features[name] = {"dtype": str(values.dtype)}
        stats = compute_episode_stats(data, features)
        total = stats if total is None else aggregate_stats([total, stats])
        out.update({f"{e}/{n}/{k}": v for n, s in stats.items() for k, v in s.items()})
    out.update({f"all/{n}/{k}": v for n, s in total.items() for k, v in s.items()})
    np.savez(sys.argv[3], **out)
    """
)


def _episodes() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for e, length in enumerate((300, 1, 40, 130)):
        out.append({
            "observation.image": _frames(length, 12, 10, 3, seed=e),
            "observation.image_grey": _frames(length, 6, 5, 1, seed=10 + e),
            "observation.image_white": np.where(rng.random((length, 16, 16, 3)) < 0.02, 0,
                                                255).astype(np.uint8),
            "observation.state": (1000 + rng.normal(0, 1e-2, size=(length, 3))).astype(np.float32),
            "action": rng.normal(size=(length, 2)),
            "frame_index": np.arange(length, dtype=np.int64),
            "next.done": np.arange(length) == length - 1,
            "next.reward": rng.normal(size=length).astype(np.float32),
        })  # fmt: skip
    return out


def _large_frames() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(8)
    out = []
    for height, width in ((300, 320), (451, 200)):
        frames = rng.integers(0, 256, size=(3, height, width, 3), dtype=np.uint8)
        frames[:, ::2] //= 3
        out.append({"observation.image": frames})
    return out


@pytest.mark.slow
@pytest.mark.parametrize("make", [_episodes, _large_frames])
def test_the_statistics_equal_lerobots_own(make: Any, lerobot_python: str, tmp_path: Path) -> None:
    episodes = make()
    source, out, pngs = tmp_path / "episodes.npz", tmp_path / "lerobot.npz", tmp_path / "png"
    pngs.mkdir()
    np.savez(
        source, **{f"{e}/{name}": v for e, ep in enumerate(episodes) for name, v in ep.items()}
    )
    result = subprocess.run([lerobot_python, "-c", LEROBOT, str(source), str(pngs), str(out)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    with np.load(out) as z:
        theirs = {key: z[key] for key in z.files}
    for feature in episodes[0]:
        image = feature.startswith("observation.image")
        per = [episode_stats(episode[feature], image) for episode in episodes]
        for label, ours in [*((str(e), s) for e, s in enumerate(per)), ("all", aggregate(per))]:
            for key, value in ours.items():
                expected = theirs[f"{label}/{feature}/{key}"]
                assert value.shape == expected.shape, (label, feature, key)
                np.testing.assert_allclose(value, expected, rtol=1e-6, atol=0,
                                           err_msg=f"{label}/{feature}/{key}")  # fmt: skip
