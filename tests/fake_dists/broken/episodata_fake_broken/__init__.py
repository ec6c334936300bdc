"""Plugins that are installed but broken; the package itself imports fine."""

from __future__ import annotations
