"""Options of the Zarr backend: chunking, codecs, sharding and TensorStore's cache."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from episodata_core.sampling.workers import dataloader_worker

__all__ = ["CodecName", "Durability", "ZarrOptions", "worker_share"]

CodecName = Literal["blosc-lz4", "zstd", "blosc-zstd", "none"]
"""A compression codec; Blosc codecs byte-shuffle dtypes wider than one byte."""

Durability = Literal["interval", "sync"]
"""When a finalized episode reaches the disk (see ``ZarrOptions.durability``)."""


class ZarrOptions(BaseModel):
    """Options of the ``zarr`` backend.

    Layout options (``chunk_bytes``, ``chunk_rows``, ``codec``, ``codec_level``,
    ``field_codecs``, ``shard_chunks``) apply when a dataset is created and are stored
    in its Zarr metadata; opening a dataset uses what is stored. ``cache_pool_bytes``
    applies to every open.

    The default codec, Blosc LZ4 with byte shuffle, was chosen by measurement
    (``tools/choose_codec.py``): it writes and reads fastest on camera frames, rendered
    frames and float state alike, compresses state best (byte shuffle is what makes
    floats compress at all), and decodes noisy camera frames 3-4x faster than zstd, which
    spends its time failing to compress noise. zstd compresses noise-free rendered frames
    further (about 9x instead of 5x): choose it per field with ``field_codecs``.
    """

    model_config = ConfigDict(extra="forbid")

    chunk_bytes: int = Field(
        default=256 << 10,
        ge=1,
        description=(
            "Uncompressed bytes per chunk along the time (row) axis; a field gets "
            "max(1, chunk_bytes // bytes per row) rows per chunk. Small enough that a "
            "random segment decodes little beyond itself and finalize rewrites little."
        ),
    )
    chunk_rows: dict[str, int] = Field(
        default_factory=dict,
        description="Rows per chunk for particular fields (by 'role/key'), overriding chunk_bytes.",
    )
    codec: CodecName = Field(
        default="blosc-lz4",
        description="Compression codec of every field unless field_codecs says otherwise.",
    )
    codec_level: int | None = Field(
        default=None,
        ge=0,
        le=22,
        description="Compression level; None: zstd 1, blosc-lz4 5, blosc-zstd 3.",
    )
    field_codecs: dict[str, CodecName] = Field(
        default_factory=dict, description="Codec per field (by 'role/key'), overriding codec."
    )
    shard_chunks: int | None = Field(
        default=None,
        ge=2,
        description=(
            "Chunks per shard file along time (the Zarr sharding codec); None stores one "
            "file per chunk. Fewer files, but finalize rewrites a whole shard."
        ),
    )
    shard_bytes: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Uncompressed bytes per shard file along time, as episodata 0.2 spelled it: "
            "sets shard_chunks to max(2, shard_bytes // chunk_bytes). Give one of the two."
        ),
    )
    fsync: bool = Field(
        default=True,
        description=(
            "Flush every write to the disk before the commit that relies on it. False "
            "still survives a crash of the writing process, but not of the machine."
        ),
    )
    durability: Durability = Field(
        default="interval",
        description=(
            "'interval': a finalized episode survives a crash of the writing process as "
            "soon as its call returns, and a power loss once the next sync point has "
            "passed (flush(), close(), or at most sync_interval seconds later). 'sync': "
            "every finalize is synced to the disk before it returns (one sync each)."
        ),
    )
    sync_interval: float = Field(
        default=1.0,
        gt=0,
        description="Seconds at most between a finalize and its sync in 'interval' mode.",
    )
    fold_bytes: int = Field(
        default=32 << 20,
        ge=0,
        description=(
            "Bytes of finalized episodes the episode log holds before they are folded "
            "into the Zarr arrays in one batch (also at flush() and close()); 0 folds "
            "at every finalize."
        ),
    )
    cache_pool_bytes: int = Field(
        default=256 << 20,
        ge=0,
        description=(
            "TensorStore cache pool for decoded chunks, shared by every array of the "
            "dataset; 0 disables caching. DataLoader workers share one pool's worth: "
            "each opens the dataset with cache_pool_bytes / num_workers."
        ),
    )

    @model_validator(mode="after")
    def _shard_bytes(self) -> ZarrOptions:
        return _shard_bytes_to_chunks(self)


def _shard_bytes_to_chunks(options: ZarrOptions) -> ZarrOptions:
    if options.shard_bytes is None:
        return options
    # stored as chunks, the one layout option the backend reads; shard_bytes is kept
    # beside it so the manifest shows what was asked for (and reopens to the same)
    chunks = max(2, options.shard_bytes // options.chunk_bytes)
    if options.shard_chunks not in (None, chunks):
        raise ValueError(
            f"shard_bytes={options.shard_bytes} and shard_chunks={options.shard_chunks} "
            "both size the shards and disagree: give one of them"
        )
    object.__setattr__(options, "shard_chunks", chunks)
    return options


def worker_share(options: ZarrOptions) -> ZarrOptions:
    """``options`` for this process: in a DataLoader worker, its part of the cache pool.

    Every worker opens the dataset again (TensorStore handles do not survive ``fork``,
    and a forked worker reads through a helper process of its own). With a whole pool
    each, the decoded chunks that all workers hold would grow with their number and, up
    to that many pools, with the dataset; split, they stay within one pool.
    """
    worker = dataloader_worker()
    if worker is None or worker.num_workers <= 1:
        return options
    share = options.cache_pool_bytes // worker.num_workers
    return options.model_copy(update={"cache_pool_bytes": share})
