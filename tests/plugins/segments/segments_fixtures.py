"""Offset-segment fixtures (formats.md §5.3): datasets plus oracles computed without the plugin.

Each ``*_case()`` function returns ``(datasets, oracle)`` so the conformance kit's
``ExporterTests`` can take them over. Sources follow the row-index encoding of §5: every
value encodes its global swm row g (state ``[g, g]``, action ``[g, -g]``, reward ``100 g``,
pixels ``g % 256``), so an off-by-one shows up as a specific wrong number.

The oracle side never calls episodata_segments: :func:`reference_plan` re-implements the
sampling of §3.2 from the spec text, and :func:`swm_segment` slices the swm *source*
columns (not the dataset) the way §6's last column says.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from episodata_core.dataset import Dataset

K_TINY = 3
TINY_LEN = (4, 6, 3)  # L = T + 1 rows per episode: T = 3, 5, 2
GOLDEN_T = (30, 24, 26, 25, 40, 10, 25, 60, 24, 33)


# -- sources ----------------------------------------------------------------------------


@dataclass
class SwmSource:
    """A stable-worldmodel style table: per-row columns and episode boundaries."""

    ep_len: tuple[int, ...]
    columns: dict[str, np.ndarray]
    flags_present: bool = True
    index_column: str = "ep_idx"
    row_constant: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def ep_offset(self) -> list[int]:
        return [int(x) for x in np.concatenate([[0], np.cumsum(self.ep_len)[:-1]])]

    @property
    def transitions(self) -> list[int]:
        return [n - 1 for n in self.ep_len]


def swm_source(
    ep_len: tuple[int, ...] = TINY_LEN,
    *,
    pusht: bool = False,
    pixels: int = 8,
) -> SwmSource:
    """The §5.2 encoding for any episode lengths; ``pusht`` drops reward/flags (§2.6)."""
    rows = int(sum(ep_len))
    g = np.arange(rows)
    offsets = np.concatenate([[0], np.cumsum(ep_len)[:-1]])
    last = offsets + np.asarray(ep_len) - 1
    episode = np.repeat(np.arange(len(ep_len)), ep_len)
    action = np.stack([g, -g], axis=1).astype(np.float32)
    columns: dict[str, np.ndarray] = {
        "action": action,
        "state": np.stack([g, g], axis=1).astype(np.float32),
        "step_idx": (g - offsets[episode]).astype(np.int64),
        "pixels": np.broadcast_to((g % 256)[:, None, None, None], (rows, pixels, pixels, 3))
        .astype(np.uint8)
        .copy(),
        "success": np.full(rows, np.nan),
    }
    if pusht:
        # finite dangling last actions, no reward or flags, episode_idx, names as metadata
        columns["episode_idx"] = (100 + episode).astype(np.int64)
        return SwmSource(
            tuple(ep_len),
            columns,
            flags_present=False,
            index_column="episode_idx",
            row_constant={"env_name": ["pusht"] * len(ep_len)},
        )
    action[last] = np.nan
    reward = (100 * g).astype(np.float64)
    reward[offsets] = np.nan
    terminated = np.zeros(rows, dtype=bool)
    truncated = np.zeros(rows, dtype=bool)
    for e, end in enumerate(last):
        if e % 3 == 0:
            terminated[end] = True
        elif e % 3 == 1:
            truncated[end] = True
    columns.update(
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        ep_idx=(7 + episode).astype(np.int32),
        env_name=np.array(["toy"] * rows),
    )
    return SwmSource(tuple(ep_len), columns)


_OBSERVATIONS = ("pixels", "state")
_FLAGS = ("terminated", "truncated")


def dataset_from_swm(source: SwmSource, **create: Any) -> Dataset:
    """The dataset the ``lewm`` importer makes of ``source`` (§2.4), with its import record.

    Written out here from the spec so the fixture does not depend on the importer.
    """
    cols = source.columns
    infos = [k for k in cols if k not in (*_OBSERVATIONS, "action", "reward", *_FLAGS)]
    episodes = []
    for g, length in zip(source.ep_offset, source.ep_len, strict=True):
        t = length - 1
        rows = slice(g, g + length)
        obs = {k: cols[k][rows] for k in _OBSERVATIONS}
        info = {k: cols[k][rows] for k in infos}
        episode: dict[str, Any] = {
            "initial_observation": {k: v[0] for k, v in obs.items()},
            "observations": {k: v[1:] for k, v in obs.items()},
            "actions": {"action": cols["action"][g : g + t]},  # action-out: A_j = action[g+j-1]
            "initial_info": {k: v[0] for k, v in info.items()},
            "infos": {k: v[1:] for k, v in info.items()},
        }
        if "reward" in cols:
            episode["rewards"] = {"reward": cols["reward"][g + 1 : g + length]}  # no shift
        if source.flags_present:
            term, trunc = bool(cols["terminated"][g + t]), bool(cols["truncated"][g + t])
            episode["terminated"] = term
            episode["truncated"] = trunc or not (term or trunc)
        else:
            episode["truncated"] = True  # missing_flags="truncated"
        episodes.append(episode)
    count = len(source.ep_len)
    record = {
        "format": "lewm",
        "source": {
            "file": "swm-tiny.h5",
            "bytes": 0,
            "sha256": None,
            "flags_present": source.flags_present,
            "reward_present": "reward" in cols,
            "index_column": source.index_column,
            "action_alignment": "out",
            "row_constant_columns": sorted(source.row_constant),
        },
        "alignment": {"source_convention": "action-out", "converted_at_import": True},
        "options": {},
        "report": {},
        "first_episode_id": 0,
        "episode_count": count,
        "episodes": {
            "source_episode": list(range(count)),
            "source_episode_id": [int(cols[source.index_column][g]) for g in source.ep_offset],
            "source_row_offset": source.ep_offset,
            "source_rows": list(source.ep_len),
            **source.row_constant,
        },
    }
    return Dataset.from_episodes(episodes, metadata={"imports": [record]}, **create)


# -- oracle -----------------------------------------------------------------------------


def reference_plan(
    lengths: list[int], k: int, n: int, seed: int, limit: int | None = None
) -> list[tuple[int, int]]:
    """§3.2 from the text: fresh default_rng(seed); choice without replacement; then starts."""
    rng = np.random.default_rng(seed)
    pool = list(range(len(lengths)))[: len(lengths) if limit is None else limit]
    eligible = [e for e in pool if lengths[e] >= k]
    assert len(eligible) >= n
    picks = rng.choice(len(eligible), size=n, replace=False)
    chosen = [eligible[int(p)] for p in picks]  # draw order, never sorted
    plan = []
    for episode in chosen:
        start = int(rng.integers(0, lengths[episode] - k + 1))  # one scalar call each
        plan.append((episode, start))
    return plan


@dataclass
class SegmentOracle:
    """Expected contents of one segment file."""

    segment_id: str
    path: str
    episode: int
    start: int
    members: dict[str, np.ndarray]
    nan_counts: dict[str, int]
    terminated_at_goal: bool
    truncated_at_goal: bool
    source_episode_id: int
    source_row_start: int


@dataclass
class ExportOracle:
    """Expected plan and segment files of an export, plus the options that give them."""

    options: dict[str, Any]
    plans: dict[str, list[tuple[int, int]]]
    segments: dict[str, SegmentOracle]


def swm_segment(
    source: SwmSource, label: str, index: int, episode: int, start: int, k: int
) -> SegmentOracle:
    """Slice the swm source columns as the card says: rows [g+s, g+s+K], action [g+s, g+s+K-1]."""
    cols = source.columns
    g = source.ep_offset[episode]
    first = g + start
    members = {
        name: cols[name][first : first + k + (0 if name == "action" else 1)].copy()
        for name in cols
        if name not in _FLAGS or source.flags_present
    }
    for name, values in source.row_constant.items():
        members[name] = np.array([values[episode]] * (k + 1))
    members["segment_step_idx"] = np.arange(k + 1, dtype=np.int64)
    scalars = {
        "env": np.array(label),
        "source_episode": np.array(episode, dtype=np.int64),
        "start_step": np.array(start, dtype=np.int64),
        "goal_step": np.array(start + k, dtype=np.int64),
        "offset": np.array(k, dtype=np.int64),
    }
    members.update(scalars)
    nan_counts = {
        name: int(np.isnan(members[name]).sum())
        for name in ("reward", "success")
        if name in members
    }
    flags = {f: bool(members[f][k]) if f in members else False for f in _FLAGS}
    return SegmentOracle(
        segment_id=f"{label}/{index:03d}",
        path=f"episodes/{label}/episode_{index:03d}.npz",
        episode=episode,
        start=start,
        members=members,
        nan_counts=nan_counts,
        terminated_at_goal=flags["terminated"],
        truncated_at_goal=flags["truncated"],
        source_episode_id=int(cols[source.index_column][g]),
        source_row_start=first,
    )


def oracle_for(sources: dict[str, SwmSource], k: int, n: int, seed: int = 42) -> ExportOracle:
    """The export oracle of ``sources`` labelled by key."""
    plans = {label: reference_plan(src.transitions, k, n, seed) for label, src in sources.items()}
    segments = {}
    for label in sorted(sources):
        for index, (episode, start) in enumerate(plans[label]):
            oracle = swm_segment(sources[label], label, index, episode, start, k)
            segments[oracle.segment_id] = oracle
    return ExportOracle({"offset": k, "episodes_per_env": n, "seed": seed}, plans, segments)


def spec_content_sha256(arrays: dict[str, np.ndarray]) -> str:
    """§3.7's content hash, written out again for the tests."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.asarray(arrays[name])
        digest.update(name.encode("utf-8") + b"\0")
        digest.update(value.dtype.str.encode() + b"\0")
        digest.update(",".join(map(str, value.shape)).encode() + b"\0")
        digest.update(value.tobytes())  # C order
    return digest.hexdigest()


# -- cases: (datasets, oracle) --------------------------------------------------------


def swm_tiny_case() -> tuple[dict[str, Dataset], ExportOracle]:
    """§5.3: swm-tiny as label ``toy``, K = 3, n = 2, seed 42."""
    source = swm_source()
    return {"toy": dataset_from_swm(source)}, oracle_for({"toy": source}, K_TINY, 2)


def golden_case() -> tuple[dict[str, Dataset], ExportOracle]:
    """§5.3's second golden plan: T = GOLDEN_T, K = 25, n = 3."""
    source = swm_source(tuple(t + 1 for t in GOLDEN_T), pixels=2)
    return {"long": dataset_from_swm(source)}, oracle_for({"long": source}, 25, 3)


def pusht_case() -> tuple[dict[str, Dataset], ExportOracle]:
    """PushT style: no reward, no flags, episode_idx, env_name as a row-constant column."""
    source = swm_source((5, 7, 4, 6), pusht=True)
    return {"pusht": dataset_from_swm(source)}, oracle_for({"pusht": source}, 3, 3)


def two_label_case() -> tuple[dict[str, Dataset], ExportOracle]:
    """swm-tiny and the golden source together (K = 3, n = 2)."""
    sources = {"toy": swm_source(), "zlong": swm_source(tuple(t + 1 for t in GOLDEN_T))}
    datasets = {label: dataset_from_swm(src) for label, src in sources.items()}
    return datasets, oracle_for(sources, K_TINY, 2)


def native_case() -> tuple[dict[str, Dataset], list[tuple[int, int]]]:
    """A dataset written directly (bare roles, no import record); oracle is the plan."""
    lengths = [4, 2, 6, 5]
    episodes = []
    for e, t in enumerate(lengths):
        base = 100 * e
        steps = np.arange(t + 1)
        episodes.append(
            {
                "initial_observation": np.array([base, 0.0], dtype=np.float64),
                "observations": np.stack([base + steps[1:], steps[1:] * 0.5], axis=1),
                "actions": (base + steps[1:]).astype(np.int64),
                "rewards": (base + steps[1:] * 10).astype(np.float32),
                "terminated": e % 2 == 0,
                "truncated": e % 2 == 1,
            }
        )
    return {"native": Dataset.from_episodes(episodes)}, reference_plan(lengths, 2, 3, 42)
