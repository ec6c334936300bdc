"""A fake installed plugin distribution: one backend and one importer, inert."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel


class FakeBackend:
    """Satisfies the StorageBackend contract by shape only; nothing is stored."""

    name: ClassVar[str] = "fake"
    description: ClassVar[str] = "a backend for registry tests"

    class Options(BaseModel):
        pass

    @classmethod
    def create(cls, schema: Any, location: str | None, options: BaseModel) -> FakeBackend:
        return cls()

    @property
    def schema(self) -> Any:
        raise NotImplementedError

    def episode_table(self) -> Any:
        raise NotImplementedError

    def start_episode(self, rows: Any) -> int:
        raise NotImplementedError

    def append_rows(self, episode: int, rows: Any) -> None:
        raise NotImplementedError

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        raise NotImplementedError

    def add_episode(self, rows: Any, *, terminated: bool, truncated: bool) -> int:
        raise NotImplementedError

    def read_rows(self, episode: int, start: int, stop: int, fields: Any) -> Any:
        raise NotImplementedError

    def gather_rows(self, request: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


class FakeImporter:
    name: ClassVar[str] = "fakeimp"
    description: ClassVar[str] = "an importer for registry tests"

    class Options(BaseModel):
        pass

    def read_schema(self, source: str, options: BaseModel) -> Any:
        raise NotImplementedError

    def import_into(self, source: str, dataset: Any, options: BaseModel) -> Any:
        raise NotImplementedError
