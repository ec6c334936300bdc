"""Minari fixtures (design notes §5.4): hand-written dataset folders and their oracles.

Every builder writes a real ``data/main_data.hdf5`` with h5py in the layout minari's
HDF5 storage writes (one ``episode_{id}`` group with attrs ``id``, ``seed`` and
``total_steps``; Dict spaces as sub-groups, Tuple spaces as ``_index_<k>``; observations
and ``infos/*`` with T + 1 rows, the rest with T) plus ``data/metadata.json``, and needs
no minari.

Row-index encoding (§5): global observation row g (counting T + 1 rows per episode)
holds ``[g, 0]``; the action and reward that *led to* row g hold ``10 g`` and ``100 g``;
``infos/x`` at row g is ``-g``. An off-by-one therefore shows as a specific wrong number.

The oracle of each builder comes from plain loops over the generating arrays (row j of
the observations, ``actions[t - 1]`` for step t, ``terminations[T - 1]``), never from the
importer.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from episodata_core.testing import ExpectedEpisode, ExpectedImport

if TYPE_CHECKING:
    from pathlib import Path

TINY_T = (3, 4, 2)
TINY_SEEDS = (11, 12, None)
# (terminated, truncated) per episode: one of each end, and one with both flags
TINY_ENDS = ((True, False), (False, True), (True, True))
IMAGE_SHAPE = (64, 64, 3)


# -- spaces as minari serializes them ---------------------------------------------------


def box(shape: tuple[int, ...], dtype: str, low: float = -1e3, high: float = 1e3) -> dict:
    return {
        "type": "Box",
        "dtype": dtype,
        "shape": list(shape),
        "low": np.full(shape, low).tolist(),
        "high": np.full(shape, high).tolist(),
    }


def discrete(n: int) -> dict:
    return {"type": "Discrete", "dtype": "int64", "start": 0, "n": n}


def dict_space(**subspaces: dict) -> dict:
    return {"type": "Dict", "subspaces": subspaces}


def tuple_space(*subspaces: dict) -> dict:
    return {"type": "Tuple", "subspaces": list(subspaces)}


# -- the writer -------------------------------------------------------------------------


@dataclass
class MinariEpisode:
    """One episode's stored columns: arrays, dicts of them (Dict) or tuples (Tuple)."""

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    @property
    def steps(self) -> int:
        return len(self.rewards)


def _write_value(group: h5py.Group, name: str, value: Any) -> None:
    if isinstance(value, dict):
        sub = group.create_group(name)
        for key, item in value.items():
            _write_value(sub, key, item)
    elif isinstance(value, tuple):
        sub = group.create_group(name)
        for position, item in enumerate(value):
            _write_value(sub, f"_index_{position}", item)
    elif isinstance(value, list):  # strings, as minari writes them
        group.create_dataset(name, data=value, dtype=h5py.string_dtype("utf-8"))
    else:
        array = np.asarray(value)
        group.create_dataset(
            name, data=array, chunks=True if array.size else None, maxshape=(None, *array.shape[1:])
        )


def write_minari(
    folder: Path,
    episodes: list[MinariEpisode],
    *,
    observation_space: dict | None,
    action_space: dict | None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``folder/data/{main_data.hdf5, metadata.json}``; returns ``folder``."""
    data = folder / "data"
    data.mkdir(parents=True)
    with h5py.File(data / "main_data.hdf5", "w", track_order=True) as handle:
        for episode_id, episode in enumerate(episodes):
            group = handle.create_group(f"episode_{episode_id}")
            group.attrs["id"] = episode_id
            if episode.seed is not None:
                group.attrs["seed"] = episode.seed
            group.attrs["total_steps"] = episode.steps
            for key in ("observations", "actions", "rewards", "terminations", "truncations"):
                _write_value(group, key, getattr(episode, key))
            if episode.infos:
                _write_value(group, "infos", episode.infos)
    written: dict[str, Any] = {
        "dataset_id": f"test/{folder.name}",
        "total_episodes": len(episodes),
        "total_steps": sum(episode.steps for episode in episodes),
        "data_format": "hdf5",
        "minari_version": "0.5.1",
        "jpeg_encoding": False,
    }
    if observation_space is not None:
        written["observation_space"] = json.dumps(observation_space)
    if action_space is not None:
        written["action_space"] = json.dumps(action_space)
    written.update(metadata or {})
    (data / "metadata.json").write_text(json.dumps(written), encoding="utf-8")
    return folder


def _flags(steps: int, end: bool) -> np.ndarray:
    flags = np.zeros(steps, dtype=bool)
    flags[-1:] = end
    return flags


# -- the §5.4 tiny dataset --------------------------------------------------------------


def tiny_episodes(steps: tuple[int, ...] = TINY_T) -> list[MinariEpisode]:
    """The row-index-encoded Box episodes (obs [g, 0] f32, action 10g, reward 100g f64)."""
    episodes = []
    g0 = 0
    for e, (t, seed) in enumerate(zip(steps, TINY_SEEDS, strict=False)):
        g = np.arange(g0, g0 + t + 1)
        terminated, truncated = TINY_ENDS[e % len(TINY_ENDS)]
        episodes.append(
            MinariEpisode(
                observations=np.stack([g, np.zeros_like(g)], axis=1).astype(np.float32),
                actions=(10 * g[1:, None]).astype(np.float32),
                rewards=(100 * g[1:]).astype(np.float64),
                terminations=_flags(t, terminated),
                truncations=_flags(t, truncated),
                infos={"x": (-g).astype(np.int64)},
                seed=seed,
            )
        )
        g0 += t + 1
    return episodes


TINY_OBS_SPACE = box((2,), "float32")
TINY_ACTION_SPACE = box((1,), "float32")


def tiny(folder: Path, **metadata: Any) -> Path:
    """§5.4 hand-written layout: 3 episodes, Box obs, f64 rewards, infos/x, jpeg_encoding false."""
    return write_minari(
        folder,
        tiny_episodes(),
        observation_space=TINY_OBS_SPACE,
        action_space=TINY_ACTION_SPACE,
        metadata=metadata,
    )


# -- Dict and Tuple spaces --------------------------------------------------------------


def dict_episodes() -> list[MinariEpisode]:
    """Dict obs {goal: {xy}, pos}, Discrete actions, f32 rewards, nested, bool and str infos."""
    episodes = []
    g0 = 0
    for t, end in ((2, (True, False)), (3, (False, True))):
        g = np.arange(g0, g0 + t + 1)
        episodes.append(
            MinariEpisode(
                observations={
                    "pos": np.stack([g, -g], axis=1).astype(np.float32),
                    "goal": {"xy": np.stack([g + 0.5, g + 0.25], axis=1)},
                },
                actions=(10 * g[1:]).astype(np.int64),
                rewards=(100 * g[1:]).astype(np.float32),
                terminations=_flags(t, end[0]),
                truncations=_flags(t, end[1]),
                infos={
                    "state": {"qpos": np.stack([g, g, g], axis=1).astype(np.float64)},
                    "success": g % 2 == 0,
                    "label": [f"row-{int(v)}" for v in g],
                },
                seed=100 + len(episodes),
            )
        )
        g0 += t + 1
    return episodes


DICT_OBS_SPACE = dict_space(goal=dict_space(xy=box((2,), "float64")), pos=box((2,), "float32"))


def dict_case(folder: Path) -> Path:
    return write_minari(
        folder, dict_episodes(), observation_space=DICT_OBS_SPACE, action_space=discrete(1000)
    )


def tuple_episodes() -> list[MinariEpisode]:
    """Tuple obs (Box(3) f32, Discrete), Tuple actions (Box(1) f32, Discrete), no infos."""
    episodes = []
    g0 = 0
    for t in (3, 1):
        g = np.arange(g0, g0 + t + 1)
        episodes.append(
            MinariEpisode(
                observations=(np.stack([g, g, g], axis=1).astype(np.float32), g.astype(np.int64)),
                actions=((10 * g[1:, None]).astype(np.float32), (10 * g[1:]).astype(np.int64)),
                rewards=(100 * g[1:]).astype(np.float64),
                terminations=_flags(t, False),
                truncations=_flags(t, True),
                seed=None,
            )
        )
        g0 += t + 1
    return episodes


TUPLE_OBS_SPACE = tuple_space(box((3,), "float32"), discrete(1000))
TUPLE_ACTION_SPACE = tuple_space(box((1,), "float32"), discrete(1000))


def tuple_case(folder: Path) -> Path:
    return write_minari(
        folder,
        tuple_episodes(),
        observation_space=TUPLE_OBS_SPACE,
        action_space=TUPLE_ACTION_SPACE,
    )


# -- the oracle: plain loops over the generating arrays ----------------------------------


def _leaves(value: Any, prefix: str, out: dict[str, np.ndarray]) -> None:
    """``{field key: array}`` the way docs/minari.md names them: Dict keys, Tuple positions, '/'."""
    if isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, f"{prefix}{key}/", out)
    elif isinstance(value, tuple):
        for position, item in enumerate(value):
            _leaves(item, f"{prefix}{position}/", out)
    elif isinstance(value, list):
        out[prefix.rstrip("/")] = np.asarray(value, dtype=str)
    else:
        out[prefix.rstrip("/")] = np.asarray(value)


def oracle_episode(episode: MinariEpisode) -> ExpectedEpisode:
    """Rows j = 0..T of observations and infos; step t = 1..T takes actions[t - 1]."""
    steps = episode.steps
    observations: dict[str, np.ndarray] = {}
    actions: dict[str, np.ndarray] = {}
    infos: dict[str, np.ndarray] = {}
    _leaves(episode.observations, "", observations)
    _leaves(episode.actions, "", actions)
    _leaves(episode.infos, "", infos)
    obs_rows = {
        key or "observation": np.stack([values[j] for j in range(steps + 1)])
        for key, values in observations.items()
    }
    action_rows = {
        key or "action": np.stack([values[t - 1] for t in range(1, steps + 1)])
        for key, values in actions.items()
    }
    info_rows = {
        f"info/{key}": np.stack([values[j] for j in range(steps + 1)])
        for key, values in infos.items()
    }
    rewards = np.asarray([episode.rewards[t - 1] for t in range(1, steps + 1)])
    return ExpectedEpisode(
        observations={f"observation/{k}": v for k, v in obs_rows.items()},
        actions={f"action/{k}": v for k, v in action_rows.items()},
        rewards={"reward/reward": rewards.astype(episode.rewards.dtype)},
        infos=info_rows,
        terminated=bool(episode.terminations[steps - 1]),
        truncated=bool(episode.truncations[steps - 1]),
    )


def oracle(
    episodes: list[MinariEpisode], folder: Path, **extra: Any
) -> tuple[Path, ExpectedImport]:
    """The kit's oracle of a folder written from ``episodes``."""
    expected = ExpectedImport(
        episodes=[oracle_episode(episode) for episode in episodes if episode.steps],
        provenance={
            "id": [i for i, episode in enumerate(episodes) if episode.steps],
            "seed": [episode.seed for episode in episodes if episode.steps],
        },
        source={"dataset_id": f"test/{folder.name}", "data_format": "hdf5"},
        **extra,
    )
    return folder, expected


# -- JPEG-encoded images (minari >= 0.5.3) -----------------------------------------------


def smooth_images(count: int, offset: int = 0) -> np.ndarray:
    """``[count, 64, 64, 3]`` uint8 gradients that survive JPEG with a small error."""
    y, x = np.mgrid[0 : IMAGE_SHAPE[0], 0 : IMAGE_SHAPE[1]]
    images = [
        np.stack([x * 2 + 10 * (i + offset), y * 2, np.full_like(x, 40 * i)], axis=-1)
        for i in range(count)
    ]
    return np.asarray(images, dtype=np.uint8)


def jpeg_bytes(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def image_case(folder: Path, storage: str) -> tuple[Path, list[np.ndarray]]:
    """Two episodes with a 64x64x3 image obs; ``storage`` is 'vlen', 'padded' or 'raw'.

    Returns the folder and each episode's original ``[T + 1, 64, 64, 3]`` images.
    """
    originals, episodes = [], []
    for e, t in enumerate((2, 3)):
        images = smooth_images(t + 1, offset=5 * e)
        originals.append(images)
        encoded = [np.frombuffer(jpeg_bytes(image), dtype=np.uint8) for image in images]
        if storage == "raw":
            stored: Any = images
        elif storage == "padded":
            width = max(len(row) for row in encoded)
            stored = np.zeros((len(encoded), width), dtype=np.uint8)
            for row, data in enumerate(encoded):
                stored[row, : len(data)] = data
        else:
            stored = encoded
        episodes.append(
            MinariEpisode(
                observations=stored,
                actions=np.arange(t, dtype=np.int64),
                rewards=np.ones(t),
                terminations=_flags(t, True),
                truncations=_flags(t, False),
            )
        )
    data = folder / "data"
    write_minari(
        folder,
        [],
        observation_space=box(IMAGE_SHAPE, "uint8", 0, 255),
        action_space=discrete(10),
        metadata={
            "jpeg_encoding": storage != "raw",
            "minari_version": "0.5.3",
            "total_episodes": len(episodes),
            "total_steps": sum(episode.steps for episode in episodes),
        },
    )
    (data / "main_data.hdf5").unlink()
    with h5py.File(data / "main_data.hdf5", "w", track_order=True) as handle:
        for episode_id, episode in enumerate(episodes):
            group = handle.create_group(f"episode_{episode_id}")
            group.attrs["id"] = episode_id
            group.attrs["total_steps"] = episode.steps
            if storage == "vlen":
                column = group.create_dataset(
                    "observations", (episode.steps + 1,), dtype=h5py.vlen_dtype(np.uint8)
                )
                for row, data_row in enumerate(episode.observations):
                    column[row] = data_row
            else:
                _write_value(group, "observations", episode.observations)
            for key in ("actions", "rewards", "terminations", "truncations"):
                _write_value(group, key, getattr(episode, key))
    return folder, originals


# -- malformed datasets -------------------------------------------------------------------


def _edit_metadata(folder: Path, **changes: Any) -> None:
    path = folder / "data" / "metadata.json"
    metadata = json.loads(path.read_text(encoding="utf-8"))
    metadata.update(changes)
    path.write_text(json.dumps(metadata), encoding="utf-8")


def _replace(folder: Path, key: str, value: Any) -> None:
    with h5py.File(folder / "data" / "main_data.hdf5", "a") as handle:
        del handle[key]
        parent, _, name = key.rpartition("/")
        _write_value(handle[parent], name, value)


@dataclass(frozen=True)
class Bad:
    """A malformed dataset: the error it raises, a message fragment, the options used."""

    source: Path
    error: type[BaseException]
    fragment: str
    options: dict[str, Any] = field(default_factory=dict)
    after_schema: bool = False
    """True when read_schema accepts it and import_into rejects it (destination exists)."""


def bad(folder: Path, case: str) -> Bad:
    """Write the malformed dataset ``case`` of :data:`BAD_CASES` into ``folder/case``."""
    from episodata_core.errors import FormatError

    root = folder / case
    if case in ("kept_jpeg_damaged", "corrupt_jpeg"):
        image_case(root, "vlen")
    else:
        tiny(root)
    data = root / "data"
    options: dict[str, Any] = {}
    after = False
    if case == "total_steps_mismatch":
        _edit_metadata(root, total_steps=10)
        fragment = "hold 9 steps in all but metadata.json says total_steps = 10"
    elif case == "actions_t_plus_1":  # §5.4: HDF5 actions with T + 1 rows
        _replace(root, "episode_1/actions", np.zeros((5, 1), np.float32))
        fragment = "episode_1 (T = 4): actions: 5 rows (expected 4)"
    elif case == "observations_t_rows":
        _replace(root, "episode_0/observations", np.zeros((3, 2), np.float32))
        fragment = "episode_0 (T = 3): observations: 3 rows (expected 4)"
    elif case == "infos_t_rows":
        _replace(root, "episode_2/infos/x", np.zeros(2, np.int64))
        fragment = "episode_2 (T = 2): infos/x: 2 rows (expected 3)"
    elif case == "episode_count":
        _edit_metadata(root, total_episodes=4)
        fragment = "holds 3 episode groups but metadata.json says total_episodes = 4"
    elif case == "early_flag":
        flags = np.zeros(4, dtype=bool)
        flags[[1, 3]] = True
        _replace(root, "episode_1/terminations", flags)
        fragment = "episode_1/terminations at row(s) [1]"
        after = True
    elif case == "flag_value_2":
        _replace(root, "episode_0/truncations", np.asarray([0, 2, 0], np.int8))
        fragment = "episode_0/truncations must hold bool or 0/1 values; 1 row(s) do not (row 1: 2)"
        after = True
    elif case == "missing_rewards":
        with h5py.File(data / "main_data.hdf5", "a") as handle:
            del handle["episode_2/rewards"]
        fragment = "episode_2 lacks ['rewards']"
    elif case in ("arrow", "parquet"):
        _edit_metadata(root, data_format=case)
        fragment = (
            f"data_format '{case}' is not supported; the minari importer reads only the 'hdf5'"
        )
    elif case == "no_metadata":
        (data / "metadata.json").unlink()
        fragment = "no metadata.json"
    elif case == "not_hdf5":
        (data / "main_data.hdf5").write_text("not hdf5", encoding="utf-8")
        fragment = "is not an HDF5 file"
    elif case == "space_mismatch":
        _edit_metadata(root, observation_space=json.dumps(box((3,), "float32")))
        fragment = "observations stores per-step shape (2,) but its Box space in metadata.json"
    elif case == "leaves_differ":
        with h5py.File(data / "main_data.hdf5", "a") as handle:
            handle["episode_1/infos/y"] = np.zeros(5)
        fragment = "episode_1 adds ['infos/y']"
    elif case == "kept_jpeg_damaged":  # kept bytes are checked too, though not decoded
        with h5py.File(data / "main_data.hdf5", "a") as handle:
            handle["episode_1/observations"][2] = np.arange(50, dtype=np.uint8)
        fragment = "episode_1/observations row 2 does not start like a JPEG image"
        options = {"decode_images": False}
    elif case == "corrupt_jpeg":
        with h5py.File(data / "main_data.hdf5", "a") as handle:
            handle["episode_1/observations"][2] = np.arange(50, dtype=np.uint8)
        fragment = "episode_1/observations: row 2 is not a decodable JPEG image"
        options = {"decode_images": True}
        after = True
    else:
        raise ValueError(f"unknown bad case {case!r}")
    return Bad(root, FormatError, fragment, options, after)


BAD_CASES = (
    "total_steps_mismatch",
    "actions_t_plus_1",
    "observations_t_rows",
    "infos_t_rows",
    "episode_count",
    "early_flag",
    "flag_value_2",
    "missing_rewards",
    "arrow",
    "parquet",
    "no_metadata",
    "not_hdf5",
    "space_mismatch",
    "leaves_differ",
    "kept_jpeg_damaged",
    "corrupt_jpeg",
)
