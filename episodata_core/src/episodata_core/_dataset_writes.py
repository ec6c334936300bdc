"""The writing members of :class:`~episodata_core.dataset.Dataset`.

Whole episodes, step writers, metadata, and taking this process's writer of a stored
dataset at the first write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from episodata_core import _bulk, _creation, _shared_writer, hooks
from episodata_core._dataset_base import _DatasetBase
from episodata_core.errors import ArgumentError, DatasetStateError
from episodata_core.manifest import write_manifest
from episodata_core.writers import ActionOutEpisodeWriter, EpisodeWriter, VectorEpisodeWriter

if TYPE_CHECKING:
    from collections.abc import Iterable

    from episodata_core._shared_writer import SharedWriter
    from episodata_core.normalize import Alignment
    from episodata_core.writers import AutoresetMode

__all__ = ["_DatasetWrites"]


class _DatasetWrites(_DatasetBase):
    """Episodes written whole or step by step, and the metadata in the manifest."""

    def add_episode(self, episode: Mapping[str, Any], *, alignment: Alignment | None = None) -> int:
        """Write a complete episode from a bulk dict; returns its id.

        Action-in dicts give ``initial_observation`` plus one entry per step in
        ``observations``, ``actions``, ``rewards`` (and ``infos`` with ``initial_info``);
        action-out dicts give ``observations`` where each action was taken and an
        optional ``final_observation``. ``terminated``/``truncated`` are scalars or
        per-step flags. Everything is validated before anything is written.
        """
        self._prepare_write()
        new = _bulk.checked(episode, self.schema, f"episode {self.num_episodes}", alignment)
        with self._access.lock:
            index = self._access.backend.add_episode(
                new.rows, terminated=new.terminated, truncated=new.truncated
            )
        self._after_episode_written(index)
        return index

    def add_episodes(
        self, episodes: Iterable[Mapping[str, Any]], *, alignment: Alignment | None = None
    ) -> list[int]:
        """Write several complete episodes (bulk dicts, see :meth:`add_episode`); returns their ids.

        Every episode is validated before any is written: a bad one anywhere leaves the
        dataset as it was. The ids, rows and flags are those of one :meth:`add_episode`
        call per episode, and all of them are durable when this returns. Backends that
        support it write them together: zarr with one commit, far cheaper than one by one,
        so a crash leaves all of them or none; npz_directory logs them with one append,
        so a crash leaves the first few.
        Every episode is held in memory until the write, so keep the number of episodes
        per call bounded. An empty ``episodes`` writes nothing and returns ``[]``.

        Examples
        --------
        >>> ids = dataset.add_episodes([episode_a, episode_b])
        """
        if isinstance(episodes, Mapping):
            raise ArgumentError(
                "add_episodes: expected an iterable of episode dicts, got one dict (keys "
                f"{sorted(map(str, episodes))[:4]}); pass [episode], or call add_episode"
            )
        return self._add_validated(episodes, alignment, name_items="add_episodes")

    def _add_validated(
        self,
        episodes: Iterable[Mapping[str, Any]],
        alignment: Alignment | None,
        *,
        name_items: str | None,
    ) -> list[int]:
        """Validate every episode, then write them all; ``name_items`` labels errors."""
        self._prepare_write()
        return _bulk.add_checked(
            self._access, episodes, alignment, name_items, self._after_episode_written
        )

    def new_episode(
        self, observation: Any, infos: Mapping[str, Any] | None = None
    ) -> EpisodeWriter:
        """Start an episode at its reset observation; returns its step writer."""
        self._prepare_write()
        return EpisodeWriter.start(
            self._access, observation, infos, on_finalized=self._after_episode_written
        )

    def new_action_out_episode(self) -> ActionOutEpisodeWriter:
        """A writer for recorders that log the action taken *at* each observation."""
        self._prepare_write()
        return ActionOutEpisodeWriter(self._access, on_finalized=self._after_episode_written)

    def new_vector_episodes(
        self,
        observations: Any,
        infos: Mapping[str, Any] | None = None,
        *,
        autoreset_mode: AutoresetMode = "next_step",
    ) -> VectorEpisodeWriter:
        """Start one episode per sub-environment of a Gymnasium 1.x vector env.

        ``observations`` is what ``envs.reset()`` returned (``[N, ...]`` per field).
        """
        self._prepare_write()
        return VectorEpisodeWriter(
            self._access,
            observations,
            infos,
            on_finalized=self._after_episode_written,
            autoreset_mode=autoreset_mode,
        )

    def resume_episode(self, index: int) -> EpisodeWriter:
        """The writer of an ongoing episode, to continue adding steps."""
        self._prepare_write()
        episode = self.episode(index)
        if not episode.ongoing:
            raise DatasetStateError(
                f"episode {episode.index} is finalized and cannot be resumed; "
                "start a new one with new_episode()"
            )
        return EpisodeWriter.resume(
            self._access, episode.index, on_finalized=self._after_episode_written
        )

    def _after_episode_written(self, index: int) -> None:
        hooks.call_hook("after_episode_written", dataset=self, episode=index)

    def update_metadata(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the dataset metadata and rewrite the manifest atomically."""
        self._prepare_write()
        self._manifest.metadata.update(values)
        hooks.call_hook("before_manifest_written", dataset=self, manifest=self._manifest)
        self._write_manifest()

    def _write_manifest(self, *, durable: bool = True) -> None:
        """Persist the manifest (stored datasets); handles that share it take turns.

        ``durable=False`` skips the fsyncs: the file survives a crash of this process,
        not a power loss (for records that only need the former).
        """
        folder = self.location
        if folder is not None:
            with self._access.lock:
                write_manifest(folder, self._manifest, durable=durable)

    def _prepare_write(self) -> None:
        """Refuse writes to read-only datasets; join this process's writer on the first write.

        The first handle to write takes the writer lock and opens the backend writable
        (which recovers from a crashed writer); later handles share both.
        """
        if self._read_only:
            # a backend that can never write (an older format generation) says why
            reason = getattr(self._access.backend, "read_only_reason", None)
            raise DatasetStateError(
                reason
                or f"{self.location!r} was opened with read_only=True; open it again without "
                "it to write"
            )
        if self._lease is not None:
            return
        folder = self.location
        if folder is None:
            return
        writer, reopened = _creation.take_writer(self._access, folder, self._manifest)
        # a writer this process had already: the read-only instance is still open
        self._join(writer, close_own=not reopened)

    def _join(self, writer: SharedWriter, *, close_own: bool = False) -> None:
        """Use ``writer``'s backend, manifest and io lock from now on, holding a lease.

        ``close_own``: close the backend this handle used until now.
        """
        with self._access.lock:
            previous = self._access.rebind(writer.backend, writer.io_lock)
            self._manifest = writer.manifest
            self._lease = _shared_writer.lease(self, writer)
        if close_own:
            previous.close()
