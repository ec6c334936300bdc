"""Zarr v3 storage backend (TensorStore I/O). Work in progress."""

from __future__ import annotations
