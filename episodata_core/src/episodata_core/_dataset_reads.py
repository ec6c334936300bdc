"""The reading and sampling members of :class:`~episodata_core.dataset.Dataset`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from episodata_core._dataset_base import _DatasetBase
from episodata_core.sampling.index import WindowSpec, check_pad
from episodata_core.sampling.segments import SegmentDataset
from episodata_core.sampling.stream import SegmentStream

if TYPE_CHECKING:
    from collections.abc import Iterable

    from episodata_core.sampling.index import EpisodeFilter, Pad
    from episodata_core.sampling.transitions import TransitionSampler
    from episodata_core.stats import FieldStats
    from episodata_core.views import Transition

__all__ = ["_DatasetReads"]


class _DatasetReads(_DatasetBase):
    """Statistics, windows of transitions and uniformly drawn transitions."""

    # set by Dataset.__init__: the transition index kept between sample_transitions
    # calls, and the field selections already resolved
    _transitions: TransitionSampler
    _resolved_fields: dict[str | None, tuple[str, ...]]

    def stats(
        self, fields: str | Iterable[str] | None = None, *, refresh: bool = False
    ) -> dict[str, FieldStats]:
        """Per-element statistics of numeric fields, keyed by qualified key.

        ``count``, ``nan_count``, ``mean``, ``std``, ``min`` and ``max`` have the
        field's per-step shape; observations and infos count all T + 1 rows of an
        episode, actions and rewards the T steps. Computed episode by episode, stored
        in the metadata under ``"stats"`` (unless read-only) and reused while current;
        later calls read only what was written since. ``refresh=True`` recomputes.

        Examples
        --------
        >>> stats = dataset.stats("state")
        >>> normalized = (obs - stats["observation/state"].mean) / stats["observation/state"].std
        """
        from episodata_core.stats import dataset_stats

        return dataset_stats(self._dataset, fields, refresh=refresh)

    def segments(
        self,
        sequence_length: int | None = None,
        *,
        context_length: int | None = None,
        target_length: int | None = None,
        fields: str | Iterable[str] | None = None,
        filter: EpisodeFilter | None = None,
        pad: Pad = "suffix",
        rank: int = 0,
        world_size: int = 1,
    ) -> SegmentDataset:
        """Every window of L transitions as a map-style dataset for a DataLoader.

        ``len`` counts windows; ``[i]`` is a :class:`Segment`; ``__getitems__`` reads a
        whole loader batch at once and ``collate`` passes it through as a
        :class:`Batch` (``obs`` ``[B, L, ...]``, ``mask`` ``[B, L]``). ``rank`` and
        ``world_size`` give each distributed process a disjoint shard.
        """
        spec = WindowSpec.from_lengths(sequence_length, context_length, target_length)
        # DataLoader workers reopen stored datasets: make what this writer holds visible
        self.flush()
        return SegmentDataset(
            self._dataset,
            spec,
            fields=self._field_keys(fields),
            filter=filter,
            pad=check_pad(pad),
            rank=rank,
            world_size=world_size,
        )

    def segment_stream(
        self,
        sequence_length: int | None = None,
        *,
        context_length: int | None = None,
        target_length: int | None = None,
        batch_size: int = 64,
        seed: int | None = None,
        shuffle: bool = True,
        filter: EpisodeFilter | None = None,
        pad: Pad = "suffix",
        sampler: Any = None,
        fields: str | Iterable[str] | None = None,
        prefetch: int | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> SegmentStream:
        """Batches of segments: infinite and sampled, or one ordered pass.

        ``shuffle=True``: each batch draws ``batch_size`` windows with the sampler
        (``"uniform"`` over windows with replacement by default; a registered name or
        any object with ``sample(index, batch_size)``). ``shuffle=False``: every window
        exactly once, in order. Short episodes give one zero-padded window
        (``pad="suffix"`` or ``"prefix"``; ``None`` skips them) and ``batch.mask``
        marks real transitions. With ``context_length`` and ``target_length``,
        ``batch.context`` and ``batch.target`` split each window and share its boundary
        row. ``prefetch`` batches are read ahead in a background thread; ``None`` lets
        the backend choose (none in memory, where a thread cannot overlap a copy; 2 for
        backends that wait on files).
        """
        spec = WindowSpec.from_lengths(sequence_length, context_length, target_length)
        return SegmentStream(
            self._access,
            spec,
            batch_size=batch_size,
            seed=seed,
            shuffle=shuffle,
            filter=filter,
            pad=check_pad(pad),
            sampler=sampler,
            fields=self._field_keys(fields),
            prefetch=prefetch,
            rank=rank,
            world_size=world_size,
        )

    def sample_transitions(
        self,
        batch_size: int,
        *,
        seed: int | None = None,
        fields: str | Iterable[str] | None = None,
        filter: EpisodeFilter | None = None,
    ) -> Transition:
        """``batch_size`` transitions drawn uniformly, with the time axis removed.

        ``obs`` is ``[B, ...]`` and ``next_obs`` ``[B, ...]``, both views of one
        ``[B, 2, ...]`` buffer. Never a padded transition. The transition index is kept
        between calls and only catches up with new episodes.
        """
        return self._transitions.sample(
            batch_size, seed=seed, fields=self._field_keys(fields), filter=filter
        )

    def _field_keys(self, fields: str | Iterable[str] | None) -> tuple[str, ...]:
        if fields is None or isinstance(fields, str):
            # sampling loops pass the same selection every call; the schema never changes
            keys = self._resolved_fields.get(fields)
            if keys is None:
                keys = self._resolved_fields[fields] = self._resolve_fields(fields)
            return keys
        return self._resolve_fields(fields)

    def _resolve_fields(self, fields: str | Iterable[str] | None) -> tuple[str, ...]:
        return tuple(spec.qualified_key for spec in self.schema.resolve(fields))
