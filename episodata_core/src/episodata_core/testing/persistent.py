"""``PersistentBackendTests``: :class:`BackendTests` for backends that store datasets in a folder.

Persistence, recovery after SIGKILL, concurrent readers, the writer lock and
``verify``; the subclass provides nothing more than for :class:`BackendTests`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.schema import DatasetSchema
from episodata_core.testing.backend import B, BackendTests
from episodata_core.testing.crash import (
    SEEDS_ENV,
    chain_kills,
    chain_seeds,
    record,
    run_kill_chain,
)
from episodata_core.testing.examples import bulk_episode, example_rows

if TYPE_CHECKING:
    from episodata_core.protocols import Rows

__all__ = ["PersistentBackendTests"]


class PersistentBackendTests(BackendTests[B]):
    """:class:`BackendTests` plus persistence, recovery and concurrency.

    Subclasses provide the ``location`` fixture (a path that does not exist yet). The kill
    chains (``episodata_core.testing.crash``) print their figures; ``pytest -s`` shows them.
    """

    kill_chain_kills: ClassVar[int] = 10
    """SIGKILLs in a row on one dataset, per chain."""

    @pytest.fixture
    def location(self, tmp_path: Path) -> str | None:
        """A fresh dataset folder inside pytest's temporary directory."""
        return str(tmp_path / "dataset")

    def open_dataset(self, location: str | None, **kwargs: Any) -> Dataset:
        """Open the dataset at ``location`` through the public API."""
        assert location is not None
        return Dataset.open(location, **kwargs)

    def _write(self, dataset: Dataset, seed: int, steps: int, *, finalize: bool = True) -> Rows:
        rows = example_rows(dataset.schema, steps + 1, seed=seed)
        if finalize:
            dataset.backend.add_episode(rows, terminated=seed % 2 == 0, truncated=seed % 2 == 1)
        else:
            dataset.backend.start_episode(rows)
        return rows

    def test_manifest_names_the_backend(self, location: str | None, schema: DatasetSchema) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        dataset.close()
        assert location is not None
        manifest = json.loads((Path(location) / "manifest.json").read_text())
        assert manifest["backend"] == self.backend_cls.name
        assert DatasetSchema.model_validate(manifest["schema"]) == schema

    def test_reopen_reads_identical(self, location: str | None, schema: DatasetSchema) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        expected = [self._write(dataset, seed, steps) for seed, steps in enumerate((5, 0, 9))]
        dataset.close()
        reopened = self.open_dataset(location, read_only=True)
        table = reopened.backend.episode_table()
        assert table.length.tolist() == [5, 0, 9]
        assert table.terminated.tolist() == [True, False, True]
        assert table.truncated.tolist() == [False, True, False]
        assert table.ongoing.tolist() == [False, False, False]
        for episode, rows in enumerate(expected):
            self.assert_episode(reopened.backend, episode, rows)
        reopened.close()

    def test_finalized_episode_durable_without_close(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        writer = Dataset.create(schema, location, backend=self.backend_cls.name)
        rows = self._write(writer, 3, 6)
        # a second process would see exactly this: the writer never closed
        reader = self.open_dataset(location, read_only=True)
        assert reader.backend.episode_table().length.tolist() == [6]
        self.assert_episode(reader.backend, 0, rows)
        reader.close()
        writer.close()

    def test_ongoing_episode_survives_reopen_after_flush(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        finished = self._write(dataset, 0, 4)
        rows = example_rows(schema, 9, seed=1)
        episode = dataset.backend.start_episode({k: v[:3] for k, v in rows.items()})
        dataset.backend.append_rows(episode, {k: v[3:6] for k, v in rows.items()})
        dataset.flush()
        # rows after the flush are not durable yet; a reader sees the flushed state only
        dataset.backend.append_rows(episode, {k: v[6:8] for k, v in rows.items()})
        reader = self.open_dataset(location, read_only=True)
        table = reader.backend.episode_table()
        assert table.ongoing.tolist() == [False, True]
        assert table.length.tolist() == [4, 5]
        self.assert_episode(reader.backend, 0, finished)
        self.assert_episode(reader.backend, 1, {k: v[:6] for k, v in rows.items()})
        reader.close()
        dataset.close()  # close flushes
        reopened = self.open_dataset(location)
        self.assert_episode(reopened.backend, 1, {k: v[:8] for k, v in rows.items()})
        writer = reopened.resume_episode(1)
        reopened.backend.append_rows(writer.episode, {k: v[8:] for k, v in rows.items()})
        writer.end(terminated=True)
        assert reopened.backend.episode_table().ongoing.tolist() == [False, False]
        self.assert_episode(reopened.backend, 1, rows)
        reopened.close()

    def test_reader_sees_new_episodes_after_refresh(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        writer = Dataset.create(schema, location, backend=self.backend_cls.name)
        self._write(writer, 0, 3)
        reader = self.open_dataset(location, read_only=True)
        assert reader.num_episodes == 1
        added = self._write(writer, 1, 7)
        reader.refresh()
        assert reader.num_episodes == 2
        self.assert_episode(reader.backend, 1, added)
        reader.close()
        writer.close()

    def test_second_writer_is_refused(self, location: str | None, schema: DatasetSchema) -> None:
        assert location is not None
        writer = Dataset.create(schema, location, backend=self.backend_cls.name)
        # a writer in another process is refused, and told who holds the lock
        second = subprocess.run(
            [sys.executable, "-c", _SECOND_WRITER, location],
            capture_output=True,
            text=True,
            check=False,
        )
        assert second.returncode == 3, second.stderr
        assert f"another process (pid {os.getpid()})" in second.stdout
        # a second handle in this process shares the writer: same episodes, one lock
        other = self.open_dataset(location)
        other.add_episode(bulk_episode(schema, 2, seed=0))
        assert writer.num_episodes == other.num_episodes == 1
        other.close()
        writer.close()
        # once the first writer is gone, a new one may write
        again = self.open_dataset(location)
        again.add_episode(bulk_episode(schema, 2, seed=0))
        assert again.num_episodes == 2
        again.close()

    def test_create_over_existing_is_refused(
        self, location: str | None, schema: DatasetSchema
    ) -> None:
        Dataset.create(schema, location, backend=self.backend_cls.name).close()
        with pytest.raises(DatasetStateError, match="already holds a dataset"):
            Dataset.create(schema, location, backend=self.backend_cls.name)

    def test_read_only_refuses_writes(self, location: str | None, schema: DatasetSchema) -> None:
        Dataset.create(schema, location, backend=self.backend_cls.name).close()
        reader = self.open_dataset(location, read_only=True)
        with pytest.raises(DatasetStateError, match="read_only=True"):
            reader.add_episode(bulk_episode(schema, 2, seed=0))
        reader.close()

    def test_kill_chain(self, location: str | None, schema: DatasetSchema) -> None:
        """A writer SIGKILLed 10 times in a row on one dataset loses nothing (``crash.py``)."""
        assert location is not None
        self._kill_chains(location, schema, seeds=chain_seeds([0]), kill_ops=4)

    @pytest.mark.slow
    def test_kill_chains_soak(self, tmp_path: Path, schema: DatasetSchema) -> None:
        """Six chains of 10 kills, writers running longer between kills."""
        seeds = chain_seeds(range(1, 7))
        self._kill_chains(str(tmp_path / "chain"), schema, seeds=seeds, kill_ops=12)

    def _kill_chains(
        self,
        base: str,
        schema: DatasetSchema,
        *,
        seeds: list[int],
        kill_ops: int,
    ) -> None:
        """Run one chain per seed (at ``<base>-<seed>``); print the figures; fail on a loss."""
        chains = []
        for seed in seeds:
            figures = run_kill_chain(
                self.backend_cls.name,
                f"{base}-{seed}",
                schema,
                seed=seed,
                kills=chain_kills(self.kill_chain_kills),
                kill_ops=kill_ops,
                all_or_none=self.add_episodes_all_or_none,
            )
            record(figures)
            chains.append(figures)
        failed = [f.summary() for f in chains if f.failure is not None]
        assert not failed, "\n".join(
            [*failed, f"replay a chain with {SEEDS_ENV}=<seed> and -k {self.backend_cls.name}"]
        )
        # a chain that wrote nothing would pass without testing anything
        assert sum(f.reported_finalized for f in chains) > 0, [f.summary() for f in chains]

    def test_verify_finds_a_flipped_byte(
        self, location: str | None, schema: DatasetSchema, tmp_path: Path
    ) -> None:
        dataset = Dataset.create(schema, location, backend=self.backend_cls.name)
        for seed in range(3):
            self._write(dataset, seed, 20)
        dataset.close()
        assert location is not None
        clean = self.open_dataset(location, read_only=True)
        assert self._require_verify(clean.backend).verify() == []
        clean.close()
        files = [
            p
            for p in sorted(Path(location).rglob("*"))
            if p.is_file() and p.name not in ("manifest.json",) and not p.name.startswith(".")
        ]
        assert files
        for file in files:
            copy = tmp_path / f"damaged-{files.index(file)}"
            shutil.copytree(location, copy)
            damaged = copy / file.relative_to(location)
            data = bytearray(damaged.read_bytes())
            if not data:
                continue
            data[len(data) // 2] ^= 0xFF
            damaged.write_bytes(bytes(data))
            try:
                opened = self.open_dataset(str(copy), read_only=True)
            except EpisodataError as err:
                # refusing to open is a fine report, as long as it says where the damage is
                message = str(err)
                assert damaged.name in message or damaged.parent.name in message, message
                continue
            problems = self._require_verify(opened.backend).verify()
            opened.close()
            assert problems, f"a flipped byte in {file.name} went unnoticed"


# A second writer: exits 3 with the refusal on stdout, or 0 if it got the lock.
_SECOND_WRITER = """
import sys
from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError

dataset = Dataset.open(sys.argv[1])
try:
    dataset._prepare_write()
except DatasetStateError as err:
    print(err)
    sys.exit(3)
"""
