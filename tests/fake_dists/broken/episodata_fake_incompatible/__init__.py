"""A backend that imports fine but does not declare Options (an incompatible plugin)."""

from __future__ import annotations

from typing import Any, ClassVar


class NoOptionsBackend:
    name: ClassVar[str] = "incompatible"
    description: ClassVar[str] = "a backend without Options"

    @classmethod
    def create(cls, schema: Any, location: str | None, options: Any) -> NoOptionsBackend:
        return cls()

    def close(self) -> None:
        pass
