"""Work in progress."""

from __future__ import annotations
