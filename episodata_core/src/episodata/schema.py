"""``episodata.schema``: fields, roles and the schema document (0.2's module path)."""

from __future__ import annotations

from episodata_core.schema import ROLES, SCHEMA_VERSION, SEP, DatasetSchema, FieldSpec, Role

__all__ = ["ROLES", "SCHEMA_VERSION", "SEP", "DatasetSchema", "FieldSpec", "Role"]
