"""Needs a library that is not installed, like a plugin whose extra was left out."""

from __future__ import annotations

import episodata_fake_missing_dependency  # noqa: F401


class BrokenBackend:
    pass
