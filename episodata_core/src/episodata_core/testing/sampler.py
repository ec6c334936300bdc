"""``SamplerTests``: the conformance tests every sampler passes.

A sampler's test module subclasses it and names the class under test::

    class TestMySampler(SamplerTests[MySampler]):
        sampler_cls = MySampler

The sampler is built as ``sampler_cls(seed=seed, **sampler_kwargs)``, as
``segment_stream(sampler="name")`` builds registered samplers; override the
``sampler_kwargs`` fixture to pass more. The tests build a small memory dataset whose
observations encode ``(episode, step)``, so every value a batch holds can be traced back
to the episode and step it came from. The expected windows, masks and flags come from a
brute-force reference written with plain loops in this module, never from the sampling
engine under test. The dataset lives in the ``memory`` backend (episodata-memory).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, cast

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.protocols import Sampler
from episodata_core.sampling.index import SegmentIndex
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing.packaging import PackagingTests

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt
    from pydantic import BaseModel

    from episodata_core.registry import PluginKind
    from episodata_core.sampling.index import Pad
    from episodata_core.views import Batch

__all__ = [
    "ReferenceEpisode",
    "SamplerTests",
    "build_dataset",
    "reference_window",
    "reference_windows",
]


class NamedSampler(Sampler, Protocol):
    """A sampler plugin class: the ``Sampler`` contract plus the plugin's metadata.

    ``name``, ``description`` and ``Options`` are what every plugin class declares.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type[BaseModel]]


S = TypeVar("S", bound=NamedSampler)

#: bare roles: ``batch.obs`` is ``[B, L, 2]``, ``batch.action`` and ``batch.reward`` ``[B, L]``
SCHEMA = DatasetSchema(
    [
        FieldSpec("observation", shape=(2,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def _obs_row(episode: int, t: int) -> list[float]:
    """Observation ``t`` of ``episode`` (t = 0 is the reset observation); never zero."""
    return [episode + 1.0, t + 1.0]


def _action(episode: int, t: int) -> int:
    """Action of step ``t`` (the one that produced observation ``t + 1``); never zero."""
    return 1 + 1000 * episode + t


def _reward(episode: int, t: int) -> float:
    return episode + (t + 1) / 4


@dataclass(frozen=True)
class ReferenceEpisode:
    """What the reference knows of one episode: its id, length and flags."""

    episode: int
    length: int
    terminated: bool = False
    truncated: bool = False
    ongoing: bool = False


def _bulk(ref: ReferenceEpisode) -> dict[str, Any]:
    e, length = ref.episode, ref.length
    return {
        "initial_observation": np.array(_obs_row(e, 0), dtype=np.float32),
        "observations": np.array(
            [_obs_row(e, t + 1) for t in range(length)], dtype=np.float32
        ).reshape(length, 2),
        "actions": np.array([_action(e, t) for t in range(length)], dtype=np.int64),
        "rewards": np.array([_reward(e, t) for t in range(length)], dtype=np.float32),
        "terminated": ref.terminated,
        "truncated": ref.truncated,
    }


def build_dataset(episodes: list[ReferenceEpisode]) -> Dataset:
    """A memory dataset holding ``episodes`` (ongoing ones written step by step)."""
    dataset = Dataset.create(SCHEMA)
    for ref in episodes:
        if not ref.ongoing:
            dataset.add_episode(_bulk(ref))
            continue
        writer = dataset.new_episode(np.array(_obs_row(ref.episode, 0), dtype=np.float32))
        for t in range(ref.length):
            writer.add_step(
                {
                    "observations": np.array(_obs_row(ref.episode, t + 1), dtype=np.float32),
                    "actions": np.int64(_action(ref.episode, t)),
                    "rewards": np.float32(_reward(ref.episode, t)),
                }
            )
    return dataset


def reference_windows(
    episodes: list[ReferenceEpisode], length: int, pad: Pad
) -> list[tuple[int, int]]:
    """Every valid window as ``(episode, start)``, in index order, by brute force."""
    windows: list[tuple[int, int]] = []
    for ref in episodes:
        if ref.length >= length:
            windows.extend((ref.episode, start) for start in range(ref.length - length + 1))
        elif ref.length > 0 and pad is not None:
            windows.append((ref.episode, 0))
    return windows


def reference_window(
    ref: ReferenceEpisode, start: int, length: int, pad: Pad
) -> dict[str, npt.NDArray[Any]]:
    """The arrays a window should read: real rows at their place, zeros elsewhere."""
    real = min(length, ref.length - start)
    offset = length - real if pad == "prefix" else 0
    all_obs = np.zeros((length + 1, 2), dtype=np.float32)
    action = np.zeros(length, dtype=np.int64)
    reward = np.zeros(length, dtype=np.float32)
    mask = np.zeros(length, dtype=bool)
    terminated = np.zeros(length, dtype=bool)
    truncated = np.zeros(length, dtype=bool)
    for j in range(real + 1):
        all_obs[offset + j] = _obs_row(ref.episode, start + j)
    for j in range(real):
        t = start + j
        action[offset + j] = _action(ref.episode, t)
        reward[offset + j] = _reward(ref.episode, t)
        mask[offset + j] = True
        if t == ref.length - 1 and not ref.ongoing:
            terminated[offset + j] = ref.terminated
            truncated[offset + j] = ref.truncated
    return {
        "obs": all_obs[:-1],
        "next_obs": all_obs[1:],
        "action": action,
        "reward": reward,
        "mask": mask,
        "terminated": terminated,
        "truncated": truncated,
    }


def _decode_window(batch: Batch, b: int) -> tuple[int, int]:
    """``(episode, start)`` of row ``b``, read from its first real observation."""
    real = np.flatnonzero(np.asarray(batch.mask[b]))
    assert len(real), f"batch row {b} has no real transition"
    first = np.asarray(batch.obs[b, real[0]])
    return int(first[0]) - 1, int(first[1]) - 1


class SamplerTests(PackagingTests, Generic[S]):
    """Conformance tests for a sampler (``sample(index, batch_size) -> positions``)."""

    plugin_kind: ClassVar[PluginKind] = "sampler"
    sampler_cls: type[S]
    """The sampler class under test (set it in the subclass's body)."""

    @property
    def plugin_cls(self) -> type:
        """The class the packaging tests check: :attr:`sampler_cls`."""
        return self.sampler_cls

    #: episode lengths of the test dataset: empty, short and long; flags cycle through
    #: terminated, truncated, both and neither, and the last two episodes are ongoing
    episode_lengths: ClassVar[tuple[int, ...]] = (0, 1, 2, 5, 8, 3, 4, 6, 2, 7)
    sequence_length: ClassVar[int] = 3

    # -- fixtures and helpers a subclass may override --------------------------------------

    @pytest.fixture
    def sampler_kwargs(self) -> dict[str, Any]:
        """Extra constructor arguments besides ``seed``."""
        return {}

    def make_sampler(self, seed: int, sampler_kwargs: dict[str, Any]) -> S:
        """Build the sampler under test."""
        # the Protocol cannot declare the constructor: samplers take seed= and their options
        factory = cast("Callable[..., S]", self.sampler_cls)
        return factory(seed=seed, **sampler_kwargs)

    @pytest.fixture
    def episodes(self) -> list[ReferenceEpisode]:
        """What the reference knows of the test dataset."""
        count = len(self.episode_lengths)
        return [
            ReferenceEpisode(
                episode=e,
                length=length,
                terminated=e % 4 in (0, 2),
                truncated=e % 4 in (1, 2),
                ongoing=e >= count - 2,
            )
            for e, length in enumerate(self.episode_lengths)
        ]

    @pytest.fixture
    def dataset(self, episodes: list[ReferenceEpisode]) -> Dataset:
        """A memory dataset holding ``episodes``."""
        return build_dataset(episodes)

    @pytest.fixture
    def index(self, dataset: Dataset) -> SegmentIndex:
        """The segment index a stream over ``dataset`` samples from."""
        return SegmentIndex(dataset, self.sequence_length)

    def draw(self, sampler: S, index: SegmentIndex, batch_size: int) -> npt.NDArray[Any]:
        """Call ``sample`` and return what it gave as an array."""
        return np.asarray(sampler.sample(index, batch_size))

    def assert_batch_matches_reference(
        self, batch: Batch, episodes: list[ReferenceEpisode], pad: Pad
    ) -> list[tuple[int, int]]:
        """Every row of ``batch`` is a valid window with the reference's data and flags."""
        length = self.sequence_length
        valid = set(reference_windows(episodes, length, pad))
        windows = []
        for b in range(len(batch)):
            window = _decode_window(batch, b)
            assert window in valid, f"batch row {b} is {window}, not a valid window"
            expected = reference_window(episodes[window[0]], window[1], length, pad)
            for name, value in expected.items():
                np.testing.assert_array_equal(
                    np.asarray(getattr(batch, name)[b]),
                    value,
                    err_msg=f"{name} of batch row {b}, window {window}",
                    strict=True,
                )
            windows.append(window)
        return windows

    # -- what sample() returns ------------------------------------------------------------

    @pytest.mark.parametrize("batch_size", [1, 5, 64])
    def test_positions_are_int_1d_in_range(
        self, index: SegmentIndex, sampler_kwargs: dict[str, Any], batch_size: int
    ) -> None:
        sampler = self.make_sampler(0, sampler_kwargs)
        for _ in range(5):
            positions = self.draw(sampler, index, batch_size)
            assert positions.ndim == 1
            assert positions.dtype.kind in "iu", positions.dtype
            assert positions.shape == (batch_size,)
            assert positions.min() >= 0
            assert positions.max() < len(index)

    def test_seeds_reproduce(self, index: SegmentIndex, sampler_kwargs: dict[str, Any]) -> None:
        first = self.make_sampler(7, sampler_kwargs)
        again = self.make_sampler(7, sampler_kwargs)
        other = self.make_sampler(8, sampler_kwargs)
        draws = [self.draw(first, index, 16) for _ in range(6)]
        assert all(np.array_equal(d, self.draw(again, index, 16)) for d in draws), (
            "the same seed gave different positions"
        )
        others = [self.draw(other, index, 16) for _ in range(6)]
        assert not all(np.array_equal(d, o) for d, o in zip(draws, others, strict=True)), (
            "different seeds gave identical positions"
        )

    def test_covers_every_window(self, index: SegmentIndex, sampler_kwargs: dict[str, Any]) -> None:
        sampler = self.make_sampler(1, sampler_kwargs)
        seen: set[int] = set()
        for _ in range(400):
            seen.update(self.draw(sampler, index, 32).tolist())
            if len(seen) == len(index):
                break
        assert seen == set(range(len(index))), f"never drew {set(range(len(index))) - seen}"

    def test_serves_several_indexes(
        self, dataset: Dataset, index: SegmentIndex, sampler_kwargs: dict[str, Any]
    ) -> None:
        # one sampler object may be handed to several streams; each index gets positions
        # valid for itself, whatever the sampler remembered of the other one
        longer = SegmentIndex(dataset, self.sequence_length + 3, pad=None)
        assert 0 < len(longer) < len(index)
        sampler = self.make_sampler(2, sampler_kwargs)
        for _ in range(3):
            assert self.draw(sampler, index, 64).max() < len(index)
            positions = self.draw(sampler, longer, 64)
            assert positions.min() >= 0
            assert positions.max() < len(longer)

    def test_sees_new_episodes_after_refresh(
        self, dataset: Dataset, index: SegmentIndex, sampler_kwargs: dict[str, Any]
    ) -> None:
        sampler = self.make_sampler(3, sampler_kwargs)
        before = len(index)
        self.draw(sampler, index, 8)
        new = ReferenceEpisode(episode=len(self.episode_lengths), length=6, terminated=True)
        dataset.add_episode(_bulk(new))
        assert index.refresh()
        assert len(index) == before + 6 - self.sequence_length + 1
        seen: set[int] = set()
        for _ in range(400):
            seen.update(self.draw(sampler, index, 32).tolist())
            if seen.issuperset(range(before, len(index))):
                break
        assert seen.issuperset(range(before, len(index))), "the new windows were never drawn"
        assert max(seen) < len(index)

    # -- through segment_stream -------------------------------------------------------------

    @pytest.mark.parametrize("pad", ["suffix", "prefix"])
    def test_stream_windows_match_reference(
        self,
        dataset: Dataset,
        episodes: list[ReferenceEpisode],
        sampler_kwargs: dict[str, Any],
        pad: Pad,
    ) -> None:
        stream = dataset.segment_stream(
            self.sequence_length,
            batch_size=16,
            pad=pad,
            sampler=self.make_sampler(4, sampler_kwargs),
            prefetch=0,
        )
        drawn: set[tuple[int, int]] = set()
        for _ in range(30):
            batch = stream.sample()
            assert batch.obs.shape == (16, self.sequence_length, 2)
            drawn.update(self.assert_batch_matches_reference(batch, episodes, pad))
        # the batches are not all the same few windows
        assert len(drawn) > len(reference_windows(episodes, self.sequence_length, pad)) // 2

    def test_stream_by_registered_name(
        self, dataset: Dataset, episodes: list[ReferenceEpisode]
    ) -> None:
        def batches(seed: int) -> list[Batch]:
            stream = dataset.segment_stream(
                self.sequence_length,
                batch_size=8,
                seed=seed,
                sampler=self.sampler_cls.name,
                prefetch=0,
            )
            assert isinstance(stream.sampler, self.sampler_cls)
            return [stream.sample() for _ in range(5)]

        first, again = batches(11), batches(11)
        for a, b in zip(first, again, strict=True):
            np.testing.assert_array_equal(a.all_obs, b.all_obs, strict=True)
            self.assert_batch_matches_reference(a, episodes, "suffix")

    def test_state_dict_resumes(self, dataset: Dataset, sampler_kwargs: dict[str, Any]) -> None:
        if not callable(getattr(self.sampler_cls, "state_dict", None)):
            pytest.skip(f"{self.sampler_cls.__name__} has no state_dict()")

        def stream(seed: int) -> Any:
            sampler = self.make_sampler(seed, sampler_kwargs)
            return dataset.segment_stream(
                self.sequence_length, batch_size=8, sampler=sampler, prefetch=0
            )

        original = stream(5)
        for _ in range(3):
            original.sample()
        state = json.loads(json.dumps(original.state_dict()))  # survives a checkpoint file
        expected = [original.sample().all_obs for _ in range(4)]
        resumed = stream(6)  # another seed: everything must come from the state
        resumed.load_state_dict(state)
        for want in expected:
            np.testing.assert_array_equal(resumed.sample().all_obs, want, strict=True)
