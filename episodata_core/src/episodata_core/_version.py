"""The version of episodata-core, in one place (pyproject.toml repeats it for packaging)."""

from __future__ import annotations

__version__ = "0.3.0"
