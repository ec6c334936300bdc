"""NPZ-directory storage backend. Work in progress."""

from __future__ import annotations
