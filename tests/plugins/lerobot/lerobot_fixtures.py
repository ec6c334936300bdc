"""The two LeRobot 0.6.1 datasets in data/ (copied as they are) and their oracles.

``<name>.frames.npz`` is the ground truth written next to each dataset by the tool that
made it: ``truth/ep{e}/*`` what the environment produced, ``lerobot/*`` what LeRobot's
own ``LeRobotDataset(...)[i]`` returned for every frame. PNG images equal the truth;
video images equal LeRobot's decode (``lerobot/observation.image`` x 255).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from episodata_core.testing import ExpectedEpisode, ExpectedImport

DATA = Path(__file__).parent / "data"
LENGTHS = (6, 4, 8)
NAMES = ("pendulum-images", "pendulum-video")
TASK = "swing up"


def copy_dataset(name: str, directory: Path) -> Path:
    """A writable copy of one fixture dataset under ``directory``."""
    target = directory / name
    shutil.copytree(DATA / name, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def truth(name: str) -> dict[str, np.ndarray]:
    with np.load(DATA / f"{name}.frames.npz") as z:
        return {key: z[key] for key in z.files}


def frame_images(name: str) -> list[np.ndarray]:
    """Per episode ``[T, H, W, C]`` uint8: the images an exact import must give."""
    z = truth(name)
    if name == "pendulum-images":
        return [z[f"truth/ep{e}/image"][:n] for e, n in enumerate(LENGTHS)]
    # LeRobot's decode in [0, 1], CHW: k / 255 exactly for the level k PyAV gives
    decoded = np.rint(z["lerobot/observation.image"] * 255).astype(np.uint8).transpose(0, 2, 3, 1)
    starts = np.cumsum((0, *LENGTHS))
    return [decoded[starts[e] : starts[e + 1]] for e in range(len(LENGTHS))]


def _fill(values: np.ndarray) -> np.ndarray:
    row = np.zeros((1, *values.shape[1:]), dtype=values.dtype)
    if values.dtype.kind == "f":
        row[...] = np.nan
    return np.concatenate([values, row])


def expected_episode(name: str, e: int, final_observation: str = "drop") -> ExpectedEpisode:
    z = truth(name)
    n = LENGTHS[e]
    state = z[f"truth/ep{e}/state"][:n]
    image = frame_images(name)[e]
    action = z[f"truth/ep{e}/action"]
    reward = z[f"truth/ep{e}/reward"]
    if final_observation == "drop":
        return ExpectedEpisode(
            observations={"state": state, "image": image},
            actions={"action": action[: n - 1]},
            rewards={"reward": reward[: n - 1]},
            truncated=True,
        )
    return ExpectedEpisode(
        observations={"state": _fill(state), "image": _fill(image)},
        actions={"action": action},
        rewards={"reward": reward},
        infos={"observation_valid": np.arange(n + 1) < n},
        terminated=True,  # next.done is True on every last frame; done_means="terminated"
    )


def expected_import(
    name: str,
    episodes: tuple[int, ...] = (0, 1, 2),
    final_observation: str = "drop",
    **options: Any,
) -> ExpectedImport:
    drop = final_observation == "drop"
    given = {**options}
    if final_observation != "drop":
        given["final_observation"] = final_observation
    if episodes != (0, 1, 2):
        given["episodes"] = list(episodes)
    report: dict[str, Any] = {
        "episodes_found": 3,
        "rows_read": sum(LENGTHS[e] for e in episodes),
        "final_transitions_dropped": len(episodes) if drop else 0,
        "final_obs_source": {("dropped" if drop else "missing"): len(episodes)},
    }
    return ExpectedImport(
        episodes=[expected_episode(name, e, final_observation) for e in episodes],
        options=given,
        report=report,
        provenance={
            "episode_index": list(episodes),
            "tasks": [[TASK]] * len(episodes),
            "length": [LENGTHS[e] for e in episodes],
        },
        source={"codebase_version": "v3.0", "fps": 10, "robot_type": "pendulum", "tasks": [TASK]},
    )


def edit_info(folder: Path, change: Any) -> None:
    path = folder / "meta" / "info.json"
    info = json.loads(path.read_text())
    change(info)
    path.write_text(json.dumps(info, indent=4))


def rewrite_data(folder: Path, change: Any) -> None:
    """Rewrite data/chunk-000/file-000.parquet with ``change(table) -> table``."""
    import pyarrow.parquet as pq

    path = folder / "data" / "chunk-000" / "file-000.parquet"
    table = change(pq.read_table(path))
    # one row group per episode, as LeRobot writes them
    with pq.ParquetWriter(path, table.schema) as writer:
        for start, length in zip(np.cumsum((0, *LENGTHS[:-1])), LENGTHS, strict=True):
            writer.write_table(table.slice(int(start), length))
