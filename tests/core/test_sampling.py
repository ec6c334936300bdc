"""segments(), segment_stream() and sample_transitions() against a brute-force reference.

The dataset mixes every case of data-model.md §3 and §5: empty, short, exactly-long and
long episodes; terminated, truncated, both and neither; ongoing ones. Observations carry
``(episode + 1, t + 1)`` in their first two columns, so every window can be identified
from its data; the third column, actions and rewards are random. The expected arrays are
built from those original arrays with Python loops (``ref_windows``, ``ref_window``),
never with the sampling engine.
"""

from __future__ import annotations

import gc
import json
import math
import pickle
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata import Batch, Dataset, DatasetSchema, FieldSpec, Segment, Transition
from episodata_core.errors import DatasetStateError
from episodata_core.protocols import default_prefetch
from episodata_core.sampling import SegmentIndex

if TYPE_CHECKING:
    import pathlib

L = 4  # the default window length of these tests

SCHEMA = DatasetSchema(
    [
        FieldSpec("observation", shape=(3,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)

# (length, terminated, truncated, ongoing)
SPECS = [
    (7, True, False, False),
    (0, False, True, False),  # empty: never sampled
    (2, True, False, False),  # short: one padded window, flag inside it
    (4, False, True, False),  # exactly L
    (1, True, True, False),  # short, both flags
    (11, False, False, False),  # finalized without flags
    (3, False, False, True),  # ongoing and short
    (9, True, False, False),
    (0, False, False, True),  # ongoing and empty
    (6, False, False, True),  # ongoing and long
    (5, False, True, False),
]

SAMPLERS = ["uniform", "episode-uniform", "without-replacement"]


# -- the reference ------------------------------------------------------------------------


@dataclass
class Ep:
    """One episode as generated: the arrays the dataset was written from."""

    obs: np.ndarray  # [T + 1, 3] float32, the reset observation first
    action: np.ndarray  # [T] int64, action of step t
    reward: np.ndarray  # [T] float32
    terminated: bool = False
    truncated: bool = False
    ongoing: bool = False

    @property
    def length(self) -> int:
        return len(self.action)


def generate(episode_id: int, length: int, rng: np.random.Generator, **flags: bool) -> Ep:
    obs = np.empty((length + 1, 3), dtype=np.float32)
    obs[:, 0] = episode_id + 1
    obs[:, 1] = np.arange(1, length + 2)
    obs[:, 2] = rng.normal(size=length + 1)
    action = rng.integers(1, 1_000_000, size=length).astype(np.int64)
    reward = rng.normal(size=length).astype(np.float32)
    return Ep(obs, action, reward, **flags)


def write(dataset: Dataset, ep: Ep) -> Any:
    """Write ``ep``; an ongoing one goes through a writer, which is returned."""
    if not ep.ongoing:
        dataset.add_episode(
            {
                "initial_observation": ep.obs[0],
                "observations": ep.obs[1:],
                "actions": ep.action,
                "rewards": ep.reward,
                "terminated": ep.terminated,
                "truncated": ep.truncated,
            }
        )
        return None
    writer = dataset.new_episode(ep.obs[0])
    if ep.length:
        writer.add_steps({"observations": ep.obs[1:], "actions": ep.action, "rewards": ep.reward})
    return writer


def ref_windows(
    episodes: list[Ep], length: int, pad: str | None, keep: Any = None
) -> list[tuple[int, int]]:
    """Every valid window ``(episode, start)`` in index order."""
    windows = []
    for e, ep in enumerate(episodes):
        if keep is not None and not keep(ep):
            continue
        if ep.length >= length:
            windows.extend((e, start) for start in range(ep.length - length + 1))
        elif ep.length > 0 and pad is not None:
            windows.append((e, 0))
    return windows


def ref_window(ep: Ep, start: int, length: int, pad: str | None) -> dict[str, np.ndarray]:
    """What window ``(ep, start)`` must read: real rows in place, zeros elsewhere."""
    real = min(length, ep.length - start)
    offset = length - real if pad == "prefix" else 0
    all_obs = np.zeros((length + 1, 3), dtype=np.float32)
    action = np.zeros(length, dtype=np.int64)
    reward = np.zeros(length, dtype=np.float32)
    mask = np.zeros(length, dtype=bool)
    terminated = np.zeros(length, dtype=bool)
    truncated = np.zeros(length, dtype=bool)
    for j in range(real + 1):
        all_obs[offset + j] = ep.obs[start + j]
    for j in range(real):
        t = start + j
        action[offset + j] = ep.action[t]
        reward[offset + j] = ep.reward[t]
        mask[offset + j] = True
        if t == ep.length - 1 and not ep.ongoing:
            terminated[offset + j] = ep.terminated
            truncated[offset + j] = ep.truncated
    return {
        "obs": all_obs[:-1],
        "next_obs": all_obs[1:],
        "all_obs": all_obs,
        "action": action,
        "reward": reward,
        "mask": mask,
        "terminated": terminated,
        "truncated": truncated,
    }


def ref_batch(
    episodes: list[Ep], windows: list[tuple[int, int]], length: int, pad: str | None
) -> dict[str, np.ndarray]:
    rows = [ref_window(episodes[e], start, length, pad) for e, start in windows]
    return {name: np.stack([row[name] for row in rows]) for name in rows[0]}


def assert_matches(view: Any, expected: dict[str, np.ndarray], where: str = "") -> None:
    for name, value in expected.items():
        np.testing.assert_array_equal(
            np.asarray(getattr(view, name)), value, err_msg=f"{name} {where}", strict=True
        )


def windows_of(batch: Batch) -> list[tuple[int, int]]:
    """``(episode, start)`` of each row, read from its first real observation."""
    out = []
    for b in range(len(batch)):
        first = int(np.flatnonzero(batch.mask[b])[0])
        e, t = batch.obs[b, first, :2]
        out.append((int(e) - 1, int(t) - 1))
    return out


def assert_roughly_uniform(counts: np.ndarray, expected: np.ndarray) -> None:
    """Chi-square statistic within six standard deviations of its mean (fixed seeds)."""
    assert counts.sum() == pytest.approx(expected.sum())
    stat = float(((counts - expected) ** 2 / expected).sum())
    dof = len(counts) - 1
    assert stat < dof + 6 * math.sqrt(2 * dof), (stat, dof)


def take(stream: Any, n: int) -> list[Batch]:
    return [stream.sample() for _ in range(n)]


def assert_same_batches(got: list[Batch], want: list[Batch]) -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(a.all_obs, b.all_obs, err_msg=f"batch {i}", strict=True)
        np.testing.assert_array_equal(a.action, b.action, err_msg=f"batch {i}", strict=True)
        np.testing.assert_array_equal(a.mask, b.mask, err_msg=f"batch {i}", strict=True)


# -- fixtures -----------------------------------------------------------------------------


def make_episodes(seed: int = 0) -> list[Ep]:
    rng = np.random.default_rng(seed)
    return [
        generate(e, length, rng, terminated=term, truncated=trunc, ongoing=ongoing)
        for e, (length, term, trunc, ongoing) in enumerate(SPECS)
    ]


@pytest.fixture
def episodes() -> list[Ep]:
    return make_episodes()


@pytest.fixture
def dataset(episodes: list[Ep]) -> Dataset:
    dataset = Dataset.create(SCHEMA)
    for ep in episodes:
        write(dataset, ep)
    return dataset


def test_the_dataset_is_what_the_reference_thinks(dataset: Dataset, episodes: list[Ep]) -> None:
    assert [len(e) for e in dataset] == [ep.length for ep in episodes]
    assert [e.ongoing for e in dataset] == [ep.ongoing for ep in episodes]
    for e, ep in enumerate(episodes):
        np.testing.assert_array_equal(dataset.episode(e).read().all_obs, ep.obs, strict=True)


# -- the index ----------------------------------------------------------------------------


@pytest.mark.parametrize("pad", ["suffix", "prefix", None])
@pytest.mark.parametrize("length", [1, 4, 8])
def test_window_count_per_episode(
    dataset: Dataset, episodes: list[Ep], length: int, pad: str | None
) -> None:
    windows = ref_windows(episodes, length, pad)
    expected = [sum(1 for e, _ in windows if e == i) for i in range(len(episodes))]
    segments = dataset.segments(length, pad=pad)
    assert segments.index.windows_per_episode.tolist() == expected
    assert len(segments) == len(windows)
    # the rules of data-model.md §5, spelled out once more on the counts
    for ep, count in zip(episodes, expected, strict=True):
        if ep.length == 0:
            assert count == 0
        elif ep.length < length:
            assert count == (0 if pad is None else 1)
        else:
            assert count == ep.length - length + 1


# -- ordered pass -------------------------------------------------------------------------


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("pad", ["suffix", "prefix"])
def test_ordered_pass_yields_every_window_once_in_order(
    dataset: Dataset, episodes: list[Ep], pad: str, prefetch: int
) -> None:
    windows = ref_windows(episodes, L, pad)
    stream = dataset.segment_stream(
        L, batch_size=7, shuffle=False, pad=pad, prefetch=prefetch, seed=0
    )
    batches = list(stream)
    full, rest = divmod(len(windows), 7)
    assert rest, "the pass should end with a smaller batch"
    assert [len(b) for b in batches] == [7] * full + [rest]
    assert len(stream) == len(batches)
    seen = [w for b in batches for w in windows_of(b)]
    assert seen == windows
    expected = ref_batch(episodes, windows, L, pad)
    for i, batch in enumerate(batches):
        part = {name: value[7 * i : 7 * i + len(batch)] for name, value in expected.items()}
        assert_matches(batch, part, where=f"of batch {i} ({pad})")
        assert batch.obs.shape == (len(batch), L, 3)
        assert np.shares_memory(batch.obs, batch.next_obs)
    with pytest.raises(StopIteration):  # and it stays finished
        stream.sample()
    stream.close()


@pytest.mark.parametrize("pad", ["suffix", "prefix"])
def test_terminal_flags_only_where_the_window_holds_the_end(
    dataset: Dataset, episodes: list[Ep], pad: str
) -> None:
    windows = ref_windows(episodes, L, pad)
    (batch,) = dataset.segment_stream(
        L, batch_size=len(windows), shuffle=False, pad=pad, prefetch=0
    )
    flagged = 0
    for b, (e, start) in enumerate(windows):
        ep = episodes[e]
        real = np.flatnonzero(batch.mask[b])
        assert real.tolist() == list(range(real[0], real[0] + len(real))), "real steps adjoin"
        assert (real[0] == 0) if pad == "suffix" else (real[-1] == L - 1)
        holds_end = start + len(real) == ep.length
        for name, episode_flag in [("terminated", ep.terminated), ("truncated", ep.truncated)]:
            flags = getattr(batch, name)[b]
            if holds_end and episode_flag and not ep.ongoing:
                assert np.flatnonzero(flags).tolist() == [real[-1]], (name, e, start)
                flagged += 1
            else:
                assert not flags.any(), (name, e, start)
    # terminated: episodes 0, 2, 4, 7; truncated: 3, 4, 10 (ongoing 6 and 9 never)
    assert flagged == 7


# -- segments() ---------------------------------------------------------------------------


@pytest.mark.parametrize("pad", ["suffix", "prefix"])
def test_segments_map_style_matches_reference_and_stream(
    dataset: Dataset, episodes: list[Ep], pad: str
) -> None:
    windows = ref_windows(episodes, L, pad)
    segments = dataset.segments(L, pad=pad)
    assert len(segments) == len(windows)
    for i, (e, start) in enumerate(windows):
        segment = segments[i]
        assert isinstance(segment, Segment)
        assert len(segment) == L
        assert_matches(segment, ref_window(episodes[e], start, L, pad), where=f"of segment {i}")
    assert_matches(segments[-1], ref_window(episodes[windows[-1][0]], windows[-1][1], L, pad))
    order = np.random.default_rng(0).permutation(len(windows))[:20].tolist()
    batch = segments.__getitems__(order)
    assert isinstance(batch, Batch)
    expected = ref_batch(episodes, [windows[i] for i in order], L, pad)
    assert_matches(batch, expected, where="of __getitems__")
    assert np.shares_memory(batch.obs, batch.next_obs)
    assert segments.collate(batch) is batch
    # pickled after its views were used, it still arrives as one buffer with two views
    arrived = pickle.loads(pickle.dumps(batch))
    assert "obs" not in vars(arrived)
    assert_matches(arrived, expected, where="of a pickled batch")
    assert np.shares_memory(arrived.obs, arrived.next_obs)
    stacked = segments.collate([segments[i] for i in order])
    assert_matches(stacked, expected, where="of collated segments")
    (whole,) = dataset.segment_stream(
        L, batch_size=len(windows), shuffle=False, pad=pad, prefetch=0
    )
    assert_matches(whole, ref_batch(episodes, windows, L, pad), where="of the stream")
    everything = segments.__getitems__(list(range(len(windows))))
    for name in ("all_obs", "action", "reward", "mask", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(everything, name), getattr(whole, name))


# -- context / target ---------------------------------------------------------------------


def test_context_target_split_shares_the_boundary_row(dataset: Dataset, episodes: list[Ep]) -> None:
    windows = ref_windows(episodes, 5, "suffix")
    (batch,) = dataset.segment_stream(
        context_length=3, target_length=2, batch_size=len(windows), shuffle=False, prefetch=0
    )
    expected = ref_batch(episodes, windows, 5, "suffix")
    assert batch.obs.shape == (len(windows), 5, 3)
    context, target = batch.context, batch.target
    assert context.obs.shape == (len(windows), 3, 3)
    assert target.obs.shape == (len(windows), 2, 3)
    for name in ("obs", "next_obs", "action", "reward", "mask", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(context, name), expected[name][:, :3], err_msg=name)
        np.testing.assert_array_equal(getattr(target, name), expected[name][:, 3:], err_msg=name)
    np.testing.assert_array_equal(context.all_obs, expected["all_obs"][:, :4])
    np.testing.assert_array_equal(target.all_obs, expected["all_obs"][:, 3:])
    np.testing.assert_array_equal(target.obs[:, 0], context.next_obs[:, -1], strict=True)
    assert np.shares_memory(target.obs[:, 0], context.next_obs[:, -1])
    with pytest.raises(AttributeError, match="context_length="):
        _ = context.context  # the halves are plain batches

    segments = dataset.segments(context_length=3, target_length=2)
    picked = segments.__getitems__([0, len(segments) - 1])
    np.testing.assert_array_equal(picked.target.obs, expected["obs"][[0, -1], 3:])
    one = segments[1]
    np.testing.assert_array_equal(one.context.action, expected["action"][1, :3])
    assert np.shares_memory(one.target.obs[0], one.context.next_obs[-1])


def test_a_plain_batch_has_no_context(dataset: Dataset) -> None:
    batch = dataset.segment_stream(L, batch_size=2, seed=0, prefetch=0).sample()
    with pytest.raises(AttributeError, match="context_length= and target_length="):
        _ = batch.context
    with pytest.raises(AttributeError, match="target"):
        _ = batch.target


# -- sample_transitions -------------------------------------------------------------------


def transitions_of(episodes: list[Ep], keep: Any = None) -> list[tuple[int, int]]:
    return [
        (e, t)
        for e, ep in enumerate(episodes)
        if keep is None or keep(ep)
        for t in range(ep.length)
    ]


def test_sample_transitions_values(dataset: Dataset, episodes: list[Ep]) -> None:
    batch = dataset.sample_transitions(batch_size=300, seed=0)
    assert isinstance(batch, Transition)
    assert len(batch) == 300
    assert batch.obs.shape == (300, 3)
    assert batch.next_obs.shape == (300, 3)
    assert batch.action.shape == (300,)
    assert batch.reward.shape == (300,)
    assert batch.mask.shape == (300,)
    assert batch.mask.all(), "sample_transitions never returns padding"
    # obs is row 0 and next_obs row 1 of one [B, 2, 3] buffer (disjoint rows, one buffer)
    buffer = batch.buffers["observation/observation"]
    assert buffer.shape == (300, 2, 3)
    assert np.shares_memory(batch.obs, buffer)
    assert np.shares_memory(batch.next_obs, buffer)
    for b in range(300):
        e, t = int(batch.obs[b, 0]) - 1, int(batch.obs[b, 1]) - 1
        ep = episodes[e]
        assert 0 <= t < ep.length
        np.testing.assert_array_equal(batch.obs[b], ep.obs[t], strict=True)
        np.testing.assert_array_equal(batch.next_obs[b], ep.obs[t + 1], strict=True)
        assert batch.action[b] == ep.action[t]
        assert batch.reward[b] == ep.reward[t]
        is_last = t == ep.length - 1 and not ep.ongoing
        assert batch.terminated[b] == (is_last and ep.terminated)
        assert batch.truncated[b] == (is_last and ep.truncated)


def test_sample_transitions_covers_every_transition_uniformly(
    dataset: Dataset, episodes: list[Ep]
) -> None:
    every = transitions_of(episodes)
    batch = dataset.sample_transitions(batch_size=200 * len(every), seed=1)
    drawn = [(int(o[0]) - 1, int(o[1]) - 1) for o in batch.obs]
    position = {pair: i for i, pair in enumerate(every)}
    counts = np.zeros(len(every))
    for pair in drawn:
        counts[position[pair]] += 1  # a KeyError here is a transition that does not exist
    assert (counts > 0).all()
    assert_roughly_uniform(counts, np.full(len(every), len(drawn) / len(every)))


def test_sample_transitions_seed_filter_and_fields(dataset: Dataset, episodes: list[Ep]) -> None:
    a = dataset.sample_transitions(64, seed=3)
    b = dataset.sample_transitions(64, seed=3)
    np.testing.assert_array_equal(a.obs, b.obs, strict=True)
    assert not np.array_equal(a.obs, dataset.sample_transitions(64, seed=4).obs)

    def is_terminated(episode: Any) -> bool:
        return bool(episode.terminated)

    allowed = set(transitions_of(episodes, keep=lambda ep: ep.terminated and not ep.ongoing))
    picked = dataset.sample_transitions(400, seed=5, filter=is_terminated)
    got = {(int(o[0]) - 1, int(o[1]) - 1) for o in picked.obs}
    assert got == allowed  # 400 draws over 19 transitions: all of them, nothing else

    only_obs = dataset.sample_transitions(8, seed=6, fields=["observation"])
    assert only_obs.fields == ("observation/observation",)
    assert dict(only_obs.action) == {}  # an unselected role reads as an empty mapping
    with pytest.raises(KeyError, match="no action field"):
        only_obs.action["action"]


def test_sample_transitions_keeps_its_index_between_calls(
    dataset: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = []
    original = SegmentIndex.__init__

    def counting_init(self: SegmentIndex, *args: Any, **kwargs: Any) -> None:
        built.append(args)
        original(self, *args, **kwargs)

    monkeypatch.setattr(SegmentIndex, "__init__", counting_init)
    for seed in range(5):
        dataset.sample_transitions(4, seed=seed)
    assert len(built) == 1


# -- samplers -----------------------------------------------------------------------------


def drawn_windows(stream: Any, batches: int) -> list[tuple[int, int]]:
    return [w for batch in take(stream, batches) for w in windows_of(batch)]


def test_uniform_sampler_is_uniform_over_windows(dataset: Dataset, episodes: list[Ep]) -> None:
    windows = ref_windows(episodes, L, "suffix")
    stream = dataset.segment_stream(L, batch_size=500, seed=3, prefetch=0)
    drawn = drawn_windows(stream, 40)
    position = {w: i for i, w in enumerate(windows)}
    counts = np.zeros(len(windows))
    for w in drawn:
        counts[position[w]] += 1
    assert_roughly_uniform(counts, np.full(len(windows), len(drawn) / len(windows)))


def test_episode_uniform_gives_each_episode_equal_mass(
    dataset: Dataset, episodes: list[Ep]
) -> None:
    windows = ref_windows(episodes, L, "suffix")
    per_episode = {e: sum(1 for w in windows if w[0] == e) for e, _ in windows}
    stream = dataset.segment_stream(
        L, batch_size=500, seed=4, sampler="episode-uniform", prefetch=0
    )
    drawn = drawn_windows(stream, 40)
    # each episode gets 1 / episodes of the mass, spread evenly over its windows
    expected = np.array([len(drawn) / len(per_episode) / per_episode[e] for e, _ in windows])
    position = {w: i for i, w in enumerate(windows)}
    counts = np.zeros(len(windows))
    for w in drawn:
        counts[position[w]] += 1
    assert_roughly_uniform(counts, expected)
    episode_counts = np.array([sum(1 for w in drawn if w[0] == e) for e in per_episode])
    assert_roughly_uniform(episode_counts, np.full(len(per_episode), len(drawn) / len(per_episode)))


def test_without_replacement_covers_every_window_once_per_epoch(
    dataset: Dataset, episodes: list[Ep]
) -> None:
    windows = ref_windows(episodes, L, "suffix")
    n = len(windows)
    stream = dataset.segment_stream(
        L, batch_size=7, seed=5, sampler="without-replacement", prefetch=0
    )
    drawn = drawn_windows(stream, math.ceil(3 * n / 7))
    epochs = [drawn[k * n : (k + 1) * n] for k in range(3)]
    for epoch in epochs:
        assert sorted(epoch) == sorted(windows)
    assert epochs[0] != epochs[1], "each epoch is a new permutation"


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_seeds_reproduce(dataset: Dataset, sampler: str) -> None:
    def batches(seed: int) -> list[Batch]:
        return take(dataset.segment_stream(L, batch_size=16, seed=seed, sampler=sampler), 5)

    first = batches(7)
    assert_same_batches(batches(7), first)
    other = batches(8)
    assert any(not np.array_equal(a.all_obs, b.all_obs) for a, b in zip(first, other, strict=True))


# -- resumption ---------------------------------------------------------------------------


@pytest.mark.parametrize("prefetch", [0, 3])
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_state_dict_resumes_exactly(dataset: Dataset, sampler: str, prefetch: int) -> None:
    def stream(seed: int) -> Any:
        return dataset.segment_stream(
            L, batch_size=6, seed=seed, sampler=sampler, prefetch=prefetch
        )

    original = stream(0)
    take(original, 3)
    state = json.loads(json.dumps(original.state_dict()))  # a checkpoint file in between
    expected = take(original, 5)
    original.close()
    resumed = stream(99)  # another seed: everything comes from the state
    take(resumed, 2)
    resumed.load_state_dict(state)
    assert_same_batches(take(resumed, 5), expected)
    resumed.close()


def wait_until_read_ahead(stream: Any) -> None:
    # the read-ahead queue is full: the thread has drawn batches the caller never got
    deadline = time.monotonic() + 10
    while not (stream._queue is not None and stream._queue.full()):
        assert time.monotonic() < deadline, "the read-ahead thread never filled its queue"
        time.sleep(0.005)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_close_rewinds_read_ahead(dataset: Dataset, sampler: str) -> None:
    reference = take(
        dataset.segment_stream(L, batch_size=6, seed=1, sampler=sampler, prefetch=0), 9
    )
    stream = dataset.segment_stream(L, batch_size=6, seed=1, sampler=sampler, prefetch=3)
    got = take(stream, 3)
    wait_until_read_ahead(stream)
    stream.close()
    got += take(stream, 2)  # restarts the thread where the caller stopped
    wait_until_read_ahead(stream)
    stream.close()
    state = stream.state_dict()
    got += take(stream, 4)
    stream.close()
    assert_same_batches(got, reference)
    again = dataset.segment_stream(L, batch_size=6, seed=2, sampler=sampler, prefetch=3)
    again.load_state_dict(state)
    assert_same_batches(take(again, 4), reference[5:])
    again.close()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_ordered_pass_resumes(dataset: Dataset, episodes: list[Ep], prefetch: int) -> None:
    windows = ref_windows(episodes, L, "suffix")
    stream = dataset.segment_stream(L, batch_size=5, shuffle=False, prefetch=prefetch)
    first = [w for b in take(stream, 2) for w in windows_of(b)]
    state = stream.state_dict()
    stream.close()
    resumed = dataset.segment_stream(L, batch_size=5, shuffle=False, prefetch=prefetch)
    resumed.load_state_dict(state)
    rest = [w for b in resumed for w in windows_of(b)]
    assert first + rest == windows
    resumed.close()


# -- distributed shards -------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_rank_shards_are_disjoint_and_cover_the_pass(
    dataset: Dataset, episodes: list[Ep], world_size: int
) -> None:
    windows = ref_windows(episodes, L, "suffix")
    stream_shards, segment_shards = [], []
    for rank in range(world_size):
        stream = dataset.segment_stream(
            L, batch_size=4, shuffle=False, rank=rank, world_size=world_size, prefetch=0
        )
        batches = list(stream)
        for batch in batches:
            assert_matches(batch, ref_batch(episodes, windows_of(batch), L, "suffix"))
        stream_shards.append([w for b in batches for w in windows_of(b)])
        segments = dataset.segments(L, rank=rank, world_size=world_size)
        shard = [windows_of(segments.collate([segments[i]]))[0] for i in range(len(segments))]
        assert shard == windows_of(segments.__getitems__(list(range(len(segments)))))
        segment_shards.append(shard)
    for shards in (stream_shards, segment_shards):
        union = [w for shard in shards for w in shard]
        assert len(union) == len(set(union)), "shards overlap"
        assert sorted(union) == sorted(windows)
        assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert stream_shards == segment_shards


# -- filters and fields -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "keep"),
    [
        (lambda episode: episode.terminated, lambda ep: ep.terminated and not ep.ongoing),
        (lambda episode: len(episode) >= 6, lambda ep: ep.length >= 6),
        (lambda episode: not episode.ongoing, lambda ep: not ep.ongoing),
    ],
    ids=["terminated", "length", "finalized"],
)
def test_filter(dataset: Dataset, episodes: list[Ep], predicate: Any, keep: Any) -> None:
    windows = ref_windows(episodes, L, "suffix", keep=keep)
    assert windows
    stream = dataset.segment_stream(L, batch_size=100, shuffle=False, filter=predicate)
    (batch,) = stream
    assert windows_of(batch) == windows
    assert_matches(batch, ref_batch(episodes, windows, L, "suffix"))
    segments = dataset.segments(L, filter=predicate)
    assert windows_of(segments.__getitems__(list(range(len(segments))))) == windows
    sampled = dataset.segment_stream(L, batch_size=200, seed=0, filter=predicate, prefetch=0)
    assert set(windows_of(sampled.sample())) == set(windows)


def test_fields_selection(dataset: Dataset, episodes: list[Ep]) -> None:
    windows = ref_windows(episodes, L, "suffix")
    expected = ref_batch(episodes, windows, L, "suffix")
    (batch,) = dataset.segment_stream(
        L, batch_size=len(windows), shuffle=False, fields=["observation"]
    )
    assert batch.fields == ("observation/observation",)
    np.testing.assert_array_equal(batch.all_obs, expected["all_obs"], strict=True)
    assert dict(batch.action) == {}  # an unselected role reads as an empty mapping
    with pytest.raises(AttributeError, match="select them with fields="):
        _ = batch.action.action
    actions = dataset.segments(L, fields="action").__getitems__([0, 1])
    assert actions.fields == ("action/action",)
    np.testing.assert_array_equal(actions.action, expected["action"][:2], strict=True)
    assert dict(actions.obs) == {}  # an unselected role reads as an empty mapping
    with pytest.raises(AttributeError, match="no observation field"):
        _ = actions.obs.observation


def test_fields_selection_by_group() -> None:
    rng = np.random.default_rng(0)
    episode = {
        "initial_observation": {"camera": np.zeros((2, 2), np.uint8), "state": np.zeros(3)},
        "observations": {
            "camera": rng.integers(0, 255, (6, 2, 2)).astype(np.uint8),
            "state": rng.normal(size=(6, 3)),
        },
        "actions": {"move": rng.normal(size=(6, 2)), "keyboard": {"jump": rng.random(6) > 0.5}},
        "rewards": rng.normal(size=6).astype(np.float32),
        "terminated": True,
    }
    dataset = Dataset.from_episodes([episode])
    (batch,) = dataset.segment_stream(3, batch_size=10, shuffle=False, fields=["state", "keyboard"])
    assert sorted(batch.fields) == ["action/keyboard/jump", "observation/state"]
    assert list(batch.obs) == ["state"]
    np.testing.assert_array_equal(batch.next_obs.state[:, 0], episode["observations"]["state"][:4])
    np.testing.assert_array_equal(
        batch.action.keyboard.jump[:, -1], episode["actions"]["keyboard"]["jump"][2:]
    )
    with pytest.raises(AttributeError, match="camera"):
        _ = batch.obs.camera


# -- online data --------------------------------------------------------------------------


def test_new_episodes_join_segments_after_refresh(dataset: Dataset, episodes: list[Ep]) -> None:
    segments = dataset.segments(L)
    before = len(segments)
    new = generate(len(episodes), 6, np.random.default_rng(9), terminated=True)
    write(dataset, new)
    assert len(segments) == before, "len is fixed between refreshes (a DataLoader relies on it)"
    segments.refresh()
    assert len(segments) == before + 3
    episodes.append(new)
    windows = ref_windows(episodes, L, "suffix")
    assert windows_of(segments.__getitems__(list(range(len(segments))))) == windows
    assert_matches(segments[len(segments) - 1], ref_window(new, 2, L, "suffix"))


def test_new_episodes_join_a_stream(dataset: Dataset, episodes: list[Ep]) -> None:
    shuffled = dataset.segment_stream(L, batch_size=64, seed=0, prefetch=0)
    ordered = dataset.segment_stream(L, batch_size=64, shuffle=False, prefetch=0)
    take(shuffled, 1)
    new = generate(len(episodes), 30, np.random.default_rng(9), truncated=True)
    write(dataset, new)
    episodes.append(new)
    # the shuffled stream refreshes before every batch it draws
    drawn = drawn_windows(shuffled, 10)
    assert {w for w in drawn if w[0] == new_id(episodes)}, "the new episode was never drawn"
    for batch in take(shuffled, 2):
        assert_matches(batch, ref_batch(episodes, windows_of(batch), L, "suffix"))
    ordered.refresh()
    assert [w for b in ordered for w in windows_of(b)] == ref_windows(episodes, L, "suffix")


def new_id(episodes: list[Ep]) -> int:
    return len(episodes) - 1


def test_a_growing_episode_becomes_visible(dataset: Dataset, episodes: list[Ep]) -> None:
    segments = dataset.segments(L)
    stream = dataset.segment_stream(L, batch_size=128, seed=0, prefetch=0)
    full = generate(len(episodes), 7, np.random.default_rng(4), terminated=True)
    writer = dataset.new_episode(full.obs[0])
    e = len(episodes)

    def grown(steps: int, *, ongoing: bool = True) -> Ep:
        return Ep(
            full.obs[: steps + 1],
            full.action[:steps],
            full.reward[:steps],
            terminated=True,
            ongoing=ongoing,
        )

    def check(ep: Ep) -> None:
        segments.refresh()
        mine = [(e, start) for e_, start in ref_windows([*episodes, ep], L, "suffix") if e_ == e]
        assert segments.index.windows_per_episode[e] == len(mine)
        first = int(segments.index.first_position[e])
        for k, (_, start) in enumerate(mine):
            assert_matches(segments[first + k], ref_window(ep, start, L, "suffix"))
        # the stream refreshes by itself before each batch it draws
        drawn = set()
        for batch in take(stream, 4):
            for b, (e_, start) in enumerate(windows_of(batch)):
                if e_ == e:
                    drawn.add((e_, start))
                    row = ref_window(ep, start, L, "suffix")
                    for name, value in row.items():
                        np.testing.assert_array_equal(getattr(batch, name)[b], value)
        assert drawn == set(mine)

    check(grown(0))  # the reset row alone: nothing to sample
    for t in range(2):
        writer.add_step(
            {"observations": full.obs[t + 1], "actions": full.action[t], "rewards": full.reward[t]}
        )
    check(grown(2))  # one padded window, no flags while ongoing
    writer.add_steps(
        {"observations": full.obs[3:7], "actions": full.action[2:6], "rewards": full.reward[2:6]}
    )
    check(grown(6))
    writer.add_step(
        {
            "observations": full.obs[7],
            "actions": full.action[6],
            "rewards": full.reward[6],
            "terminated": True,
        }
    )
    check(grown(7, ongoing=False))
    assert segments[len(segments) - 1].terminated.tolist() == [False, False, False, True]


def test_index_refresh_only_visits_new_and_ongoing_episodes() -> None:
    dataset = Dataset.create(SCHEMA)
    rng = np.random.default_rng(0)
    template = generate(0, 3, rng, terminated=True)
    for _ in range(10_000):
        write(dataset, template)
    writer = write(dataset, generate(0, 2, rng, ongoing=True))
    assert writer is not None

    visited: list[int] = []

    def counting(episode: Any) -> bool:
        visited.append(episode.index)
        return True

    index = SegmentIndex(dataset, 2, filter=counting)
    assert len(visited) == 10_001
    assert len(index) == 10_000 * 2 + 1
    counted: list[int] = []
    original = index._count

    def count_spy(lengths: np.ndarray) -> np.ndarray:
        counted.append(len(lengths))
        return original(lengths)

    index._count = count_spy  # type: ignore[method-assign]
    visited.clear()
    assert not index.refresh()  # nothing new: only the ongoing episode is looked at
    assert visited == [10_000]
    assert counted == [1]

    visited.clear()
    counted.clear()
    write(dataset, generate(0, 5, rng, truncated=True))
    assert index.refresh()
    assert visited == [10_000, 10_001]  # the ongoing one and the new one, nothing else
    assert counted == [2]
    assert len(index) == 10_000 * 2 + 1 + 4
    assert index.windows_per_episode[-1] == 4
    episodes_, starts = index.locate(np.array([len(index) - 1]))
    assert (int(episodes_[0]), int(starts[0])) == (10_001, 3)


# -- custom samplers ----------------------------------------------------------------------


class MySampler:  # the README's example, verbatim
    def __init__(self, seed=None):
        self.rng = np.random.default_rng(seed)

    def sample(self, index, batch_size):
        return self.rng.integers(len(index), size=batch_size)


def test_the_readme_custom_sampler(dataset: Dataset, episodes: list[Ep]) -> None:
    windows = set(ref_windows(episodes, 4, "suffix"))
    first = dataset.segment_stream(L, batch_size=64, sampler=MySampler(seed=0), prefetch=0)
    again = dataset.segment_stream(L, batch_size=64, sampler=MySampler(seed=0), prefetch=2)
    a, b = take(first, 3), take(again, 3)
    assert_same_batches(a, b)
    for batch in a:
        assert set(windows_of(batch)) <= windows
        assert_matches(batch, ref_batch(episodes, windows_of(batch), L, "suffix"))
    with pytest.raises(DatasetStateError, match=r"MySampler has no state_dict\(\)"):
        first.state_dict()
    again.close()


def test_a_custom_sampler_sees_the_stream_index(dataset: Dataset) -> None:
    seen: list[tuple[int, int]] = []

    class Recording:
        def sample(self, index: Any, batch_size: int) -> list[int]:
            seen.append((len(index), batch_size))
            return [len(index) - 1] * batch_size  # a plain list of ints is fine

    stream = dataset.segment_stream(L, batch_size=3, sampler=Recording(), prefetch=0)
    batch = stream.sample()
    assert seen == [(len(stream.index), 3)]
    assert windows_of(batch) == [(10, 1)] * 3  # the last window of the last episode


# -- read-ahead thread --------------------------------------------------------------------


def read_ahead_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "episodata-read-ahead"}


def test_close_stops_the_read_ahead_thread(dataset: Dataset) -> None:
    before = read_ahead_threads()
    stream = dataset.segment_stream(L, batch_size=4, seed=0, prefetch=2)
    stream.sample()
    (thread,) = read_ahead_threads() - before
    stream.close()
    assert not thread.is_alive()


def test_a_dropped_stream_stops_its_read_ahead_thread(dataset: Dataset) -> None:
    before = read_ahead_threads()
    stream = dataset.segment_stream(L, batch_size=4, seed=0, prefetch=2)
    stream.sample()
    (thread,) = read_ahead_threads() - before
    del stream
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive(), "an unreachable stream kept its thread running"


def test_memory_streams_read_in_the_callers_thread_by_default(dataset: Dataset) -> None:
    # a memory gather is a copy holding the GIL: the backend asks for no read-ahead
    before = read_ahead_threads()
    stream = dataset.segment_stream(L, batch_size=4, seed=0)
    stream.sample()
    assert read_ahead_threads() - before == set()
    stream.close()


def test_file_backed_streams_read_ahead_by_default(
    episodes: list[Ep], tmp_path: pathlib.Path
) -> None:
    dataset = Dataset.create(SCHEMA, tmp_path / "ds", backend="zarr")
    for ep in episodes:
        write(dataset, ep)
    before = read_ahead_threads()
    stream = dataset.segment_stream(L, batch_size=4, seed=0)
    stream.sample()
    assert len(read_ahead_threads() - before) == 1
    stream.close()
    dataset.close()


@pytest.mark.parametrize(
    ("declared", "expected"), [(None, 2), (0, 0), (5, 5), (-1, 2), ("3", 2), (True, 2)]
)
def test_default_prefetch_reads_the_backends_declaration(declared: Any, expected: int) -> None:
    class Backend:
        pass

    if declared is not None:
        Backend.default_prefetch = declared  # type: ignore[attr-defined]
    assert default_prefetch(Backend) == expected
