"""NPZ-directory storage backend: one compressed ``.npz`` archive per episode.

A dataset folder (``backend="npz_directory"``) holds::

    manifest.json                    the core's manifest (schema, backend, provenance)
    episodes.jsonl                   append-only: one line per finalized archive with its
                                     SHA-256, size, length, flags and absent optional fields,
                                     and one per flush of an ongoing episode
    episodes/episode_000000042.npz   finalized episode 42; written once, never changed
    ongoing/episode_000000043.npz    ongoing episode 43 as of the last flush

``numpy.load(path, allow_pickle=False)`` opens any archive. Its members are the
episode's fields under their qualified keys (``observation/camera``,
``action/keyboard/jump``; key parts with characters outside ``A-Z a-z 0-9 _ . - ~`` are
percent-encoded, see :func:`episodata_npz._archive.member_name`), each ``[length + 1,
*shape]`` in the field dtype with the reset row first, plus 0-d ``episode/id``,
``episode/length``, ``episode/terminated``, ``episode/truncated`` and
``episode/ongoing``. An optional field an episode does not store has no member.

A flushed ongoing episode whose spill is later missing or damaged is reported lost, and
its id is never reused (:mod:`episodata_npz._spills`). ``open`` refuses, with a
``SchemaError`` naming the field, a manifest or log line that disagrees with the archives
(:mod:`episodata_npz._agreement`).
"""

from __future__ import annotations

from episodata_npz._backend import NpzDirectoryBackend, NpzDirectoryOptions

__all__ = ["NpzDirectoryBackend", "NpzDirectoryOptions"]

__version__ = "0.3.0"
