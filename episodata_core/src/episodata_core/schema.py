"""The dataset schema: one :class:`FieldSpec` per stored quantity, grouped by role.

The schema is authoritative once a dataset exists. It fixes each field's key, per-step
shape (no time or batch axis), dtype and role; storage layers and readers derive
everything else from it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, SupportsIndex, get_args, overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from episodata_core.errors import FieldNotFoundError, SchemaError

if TYPE_CHECKING:
    from typing import Self

    import numpy.typing as npt

    from episodata_core.normalize import Alignment

__all__ = ["ROLES", "SCHEMA_VERSION", "SEP", "DatasetSchema", "FieldSpec", "Role", "SchemaFields"]

Role = Literal["observation", "action", "reward", "info"]
ROLES: tuple[Role, ...] = get_args(Role)

SEP = "/"
"""What separates the levels of a nested field key (``"keyboard/jump"``)."""

SCHEMA_VERSION = 2
"""The version :meth:`DatasetSchema.to_dict` writes (the schema document of episodata 0.2).

A manifest stores its schema without it: the manifest's own ``format_version`` and
``format_generation`` version the whole document, the schema included.
"""

_IMAGE_CHANNELS = (1, 3, 4)


def _declaration_error(
    what: str, err: ValidationError, model: type[BaseModel] | None = None
) -> SchemaError:
    # users call FieldSpec(...) and DatasetSchema(...) directly: raise the library's own
    # SchemaError (still a ValueError) with one line per problem instead of pydantic's report
    from episodata_core._options import unknown_key

    problems = []
    for error in err.errors():
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden" and model is not None and len(error["loc"]) == 1:
            message = unknown_key(str(error["loc"][0]), model.model_fields, "argument")
        elif error["type"] != "value_error" and error["loc"]:
            message += f" (got {error['input']!r})"
        where = ".".join(str(part) for part in error["loc"])
        problems.append(f"{where}: {message}" if where else message)
    return SchemaError(f"invalid {what}: {'; '.join(problems)}")


def _normalize_dtype(value: Any) -> str:
    try:
        dtype = np.dtype(value)
    except TypeError as err:
        raise ValueError(f"{value!r} is not a NumPy dtype") from err
    if dtype.hasobject or dtype.fields is not None:
        raise ValueError(
            f"dtype {dtype} cannot be stored: use a numeric, bool or fixed-width string dtype"
        )
    # `name` is the readable spelling ("float32"); byte order only matters for strings
    return str(dtype.name) if dtype.kind in "biufc" else str(dtype.str)


class FieldSpec(BaseModel):
    """One field: a stable key, a per-step shape and dtype, and a role.

    ``FieldSpec("camera", shape=(3, 64, 64), dtype="uint8", layout="CHW")`` declares an
    observation; nested fields use ``/``-separated keys (``"keyboard/jump"``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(description="Stable key, unique within the role; '/' separates groups.")
    shape: tuple[int, ...] = Field(description="Per-step shape, without time or batch axes.")
    dtype: str = Field(description="NumPy dtype name, e.g. 'float32' or 'uint8'.")
    role: Role = Field(
        default="observation",
        description="What the field is: observation, action, reward or info.",
    )
    layout: str | None = Field(
        default=None, description="Axis layout of image fields, e.g. 'CHW' or 'HWC'."
    )
    low: int | float | list[Any] | None = Field(default=None, description="Lower bound, if known.")
    high: int | float | list[Any] | None = Field(default=None, description="Upper bound, if known.")
    optional: bool = Field(
        default=False, description="Whether an episode may omit the field entirely."
    )
    description: str = Field(default="", description="Free text for people reading the data.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="JSON-serializable extra information."
    )

    def __init__(self, *args: Any, **data: Any) -> None:
        # FieldSpec("camera", shape=...) as the README writes it, and the 0.2 positional
        # order FieldSpec(key, shape, dtype, role, low, high, layout, optional)
        if len(args) > len(_POSITIONAL):
            raise TypeError(
                f"FieldSpec takes at most {len(_POSITIONAL)} positional arguments "
                f"({', '.join(_POSITIONAL)}), got {len(args)}"
            )
        for name, value in zip(_POSITIONAL, args, strict=False):
            if name in data:
                raise TypeError(f"FieldSpec got {name} both positionally and as {name}=")
            data[name] = value
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise _declaration_error(f"FieldSpec {data.get('key')!r}", err, FieldSpec) from err

    @field_validator("key")
    @classmethod
    def _check_key(cls, key: str) -> str:
        parts = key.split("/")
        if not key or any(not part for part in parts):
            raise ValueError(
                f"key {key!r} is not a valid field key: use non-empty names joined by '/'"
            )
        return key

    @field_validator("role", mode="before")
    @classmethod
    def _check_role(cls, role: Any) -> Any:
        if role not in ROLES:
            names = ", ".join(repr(name) for name in ROLES[:-1])
            raise ValueError(f"unknown role: expected {names} or {ROLES[-1]!r} (got {role!r})")
        return role

    @field_validator("shape", mode="before")
    @classmethod
    def _check_shape(cls, shape: Any) -> Any:
        if isinstance(shape, int | np.integer):
            shape = (int(shape),)
        if isinstance(shape, Sequence) and any(int(n) < 0 for n in shape):
            raise ValueError(f"shape {tuple(shape)} has a negative dimension")
        return shape

    @field_validator("dtype", mode="before")
    @classmethod
    def _check_dtype(cls, dtype: Any) -> str:
        return _normalize_dtype(dtype)

    @field_validator("layout")
    @classmethod
    def _check_layout(cls, layout: str | None) -> str | None:
        if layout is not None and (len(set(layout)) != len(layout) or not layout.isalpha()):
            raise ValueError(f"layout {layout!r} must name each axis once with a letter")
        return layout

    @model_validator(mode="after")
    def _check_layout_rank(self) -> Self:
        if self.layout is not None and len(self.layout) != len(self.shape):
            raise ValueError(
                f"field {self.key!r}: layout {self.layout!r} names {len(self.layout)} axes "
                f"but shape {self.shape} has {len(self.shape)}"
            )
        return self

    @property
    def qualified_key(self) -> str:
        """Role and key, e.g. ``"action/camera"``: unique across the whole schema."""
        return f"{self.role}/{self.key}"

    @property
    def np_dtype(self) -> np.dtype[Any]:
        """The field dtype as a :class:`numpy.dtype`."""
        return np.dtype(self.dtype)

    @property
    def is_image(self) -> bool:
        """Whether the field is an image (it declares an axis ``layout``)."""
        return self.layout is not None


_POSITIONAL = ("key", "shape", "dtype", "role", "low", "high", "layout", "optional")


class SchemaFields(tuple[FieldSpec, ...]):
    """The fields of a schema: a tuple of specs that also answers by flat key.

    Iterating, ``len`` and ``fields[0]`` see the specs in declaration order;
    ``"camera" in fields``, ``fields["camera"]``, ``keys()``, ``values()`` and ``items()``
    address them by flat key (the key alone where it is unique across roles, else
    ``role/key``), as :meth:`DatasetSchema.field` does.
    """

    __slots__ = ()

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return any(item in (spec.key, spec.qualified_key) for spec in self)
        return tuple.__contains__(self, item)

    @overload
    def __getitem__(self, item: str) -> FieldSpec: ...
    @overload
    def __getitem__(self, item: SupportsIndex) -> FieldSpec: ...
    @overload
    def __getitem__(self, item: slice) -> tuple[FieldSpec, ...]: ...
    def __getitem__(self, item: str | SupportsIndex | slice) -> FieldSpec | tuple[FieldSpec, ...]:
        if isinstance(item, str):
            return _field_by_key(self, item)
        return tuple.__getitem__(self, item)

    def keys(self) -> list[str]:
        """Every field's flat key, in declaration order."""
        return _flat_keys(self)

    def values(self) -> list[FieldSpec]:
        """Every spec, in declaration order."""
        return list(self)

    def items(self) -> list[tuple[str, FieldSpec]]:
        """``(flat key, spec)`` pairs, in declaration order."""
        return list(zip(_flat_keys(self), self, strict=True))


class DatasetSchema(BaseModel):
    """An ordered collection of :class:`FieldSpec` with keys unique within each role.

    ``DatasetSchema([FieldSpec("state", shape=(7,), dtype="float32"), ...])``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    fields: tuple[FieldSpec, ...] = Field(description="Fields in declaration order.")

    @field_validator("fields", mode="after")
    @classmethod
    def _addressable(cls, fields: tuple[FieldSpec, ...]) -> tuple[FieldSpec, ...]:
        return SchemaFields(fields)

    def __init__(self, fields: Iterable[FieldSpec] | None = None, /, **data: Any) -> None:
        if fields is not None:
            if "fields" in data:
                raise TypeError("DatasetSchema got fields both positionally and as fields=")
            data["fields"] = tuple(fields)
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise _declaration_error("DatasetSchema", err, DatasetSchema) from err

    @model_validator(mode="after")
    def _check_unique(self) -> Self:
        seen: set[str] = set()
        for spec in self.fields:
            if spec.qualified_key in seen:
                raise ValueError(
                    f"duplicate field key {spec.key!r} in role {spec.role}: keys must be "
                    "unique within a role"
                )
            seen.add(spec.qualified_key)
        for role in ROLES:
            keys = {spec.key for spec in self.fields if spec.role == role}
            for key in keys:
                parts = key.split("/")
                for depth in range(1, len(parts)):
                    # 'a' and 'a/b' in one role would make 'a' both a leaf and a group
                    group = "/".join(parts[:depth])
                    if group in keys:
                        raise ValueError(
                            f"{role} field {group!r} is also the group of {key!r}: "
                            "a key cannot be both a field and a group"
                        )
        return self

    # -- collection protocol -------------------------------------------------------------

    def __iter__(self) -> Iterator[FieldSpec]:  # type: ignore[override]
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __contains__(self, qualified_key: object) -> bool:
        return any(spec.qualified_key == qualified_key for spec in self.fields)

    def __getitem__(self, qualified_key: str) -> FieldSpec:
        """Return the field with this qualified key (``"observation/camera"``)."""
        for spec in self.fields:
            if spec.qualified_key == qualified_key:
                return spec
        raise FieldNotFoundError(
            f"no field {qualified_key!r} in the schema (fields: {self.qualified_keys})"
        )

    @property
    def qualified_keys(self) -> tuple[str, ...]:
        """Every field's ``role/key``, in declaration order."""
        return tuple(spec.qualified_key for spec in self.fields)

    # -- queries -------------------------------------------------------------------------

    def by_role(self, role: Role) -> tuple[FieldSpec, ...]:
        """Fields of one role, in declaration order."""
        return tuple(spec for spec in self.fields if spec.role == role)

    @overload
    def field(self, key: str, /) -> FieldSpec: ...
    @overload
    def field(self, role: Role, key: str, /) -> FieldSpec: ...
    def field(self, role_or_key: str, key: str | None = None, /) -> FieldSpec:
        """The field ``key`` of ``role``, or the field with one flat key.

        ``field("camera")`` finds a key that is unique across roles (``"role/key"``
        works too); a key that two roles use raises :class:`FieldNotFoundError` naming
        both, and ``field("observation", "camera")`` picks one.
        """
        if key is None:
            return _field_by_key(self.fields, role_or_key)
        for spec in self.fields:
            if spec.role == role_or_key and spec.key == key:
                return spec
        keys = [spec.key for spec in self.fields if spec.role == role_or_key]
        raise FieldNotFoundError(
            f"no {role_or_key} field {key!r} (the {role_or_key} fields are {keys})"
        )

    def field_keys(self, role: Role | None = None) -> list[str]:
        """Flat keys of every field (or of one role's), in declaration order.

        A key is the field's own where it is unique across roles, else ``role/key``.
        """
        keys = _flat_keys(self.fields)
        if role is None:
            return keys
        return [k for k, spec in zip(keys, self.fields, strict=True) if spec.role == role]

    def resolve_fields(self, names: str | Iterable[str] | None) -> list[str]:
        """Flat keys selected by ``names``, in request order, each once.

        A name is a flat key, a ``role/key``, or a ``/`` group prefix (``"keyboard"``
        selects ``keyboard/jump`` and ``keyboard/w``); ``None`` selects every field.

        Raises
        ------
        KeyError
            A name that matches no field ("unknown field").
        """
        keys = _flat_keys(self.fields)
        if names is None:
            return keys
        if isinstance(names, str):
            names = [names]
        chosen: dict[str, None] = {}
        for name in names:
            matched = [k for k, spec in zip(keys, self.fields, strict=True) if _selects(name, spec)]
            if not matched:
                raise FieldNotFoundError(
                    f"unknown field {name!r}: not a field key, group or role/key of the "
                    f"schema (fields: {keys})"
                )
            chosen.update(dict.fromkeys(matched))
        return list(chosen)

    def validate_fields(self, values: Mapping[str, Any]) -> dict[str, npt.NDArray[Any]]:
        """Check arrays with a leading time axis against their fields; returns them cast.

        ``values`` maps flat keys (or ``role/key``) to ``[T, *field.shape]`` arrays; every
        required field must be there. Casts happen only when exact, as for writes: a
        value that does not fit the dtype is refused.

        Raises
        ------
        KeyError
            A key that is not in the schema.
        SchemaError
            A missing required field, a missing time axis, a wrong shape or dtype.
        """
        from episodata_core.normalize import coerce

        checked: dict[str, npt.NDArray[Any]] = {}
        given: set[str] = set()
        for key, value in values.items():
            try:
                spec = self.field(key)
            except FieldNotFoundError as err:
                raise FieldNotFoundError(
                    f"validate_fields: {key!r} is not in the schema (fields: {self.field_keys()})"
                ) from err
            array = np.asarray(value)
            if array.ndim != len(spec.shape) + 1:
                raise SchemaError(
                    f"validate_fields: {spec.role} field {spec.key!r}: expected "
                    f"[T, *{spec.shape}] with a leading time axis, got shape {array.shape}"
                )
            checked[key] = coerce(array, spec, where="validate_fields", leading=array.shape[:1])
            given.add(spec.qualified_key)
        missing = [
            k
            for k, spec in zip(self.field_keys(), self.fields, strict=True)
            if not spec.optional and spec.qualified_key not in given
        ]
        if missing:
            raise SchemaError(f"validate_fields: missing required fields {missing}")
        return checked

    def is_bare(self, role: Role) -> bool:
        """Whether ``role`` was created from one array: its only field is keyed by the role."""
        fields = self.by_role(role)
        return len(fields) == 1 and fields[0].key == role

    def resolve(self, selectors: str | Iterable[str] | None) -> tuple[FieldSpec, ...]:
        """Fields selected by exact key, ``/`` group prefix, or qualified ``role/key``.

        ``None`` selects everything. A selector that matches nothing raises
        :class:`FieldNotFoundError`. The result keeps schema order.
        """
        if selectors is None:
            return self.fields
        if isinstance(selectors, str):
            selectors = [selectors]
        chosen: set[str] = set()
        for selector in selectors:
            matched = [spec for spec in self.fields if _selects(selector, spec)]
            if not matched:
                raise FieldNotFoundError(
                    f"fields=: {selector!r} matches no field key, group or role/key "
                    f"(fields: {list(self.qualified_keys)})"
                )
            chosen.update(spec.qualified_key for spec in matched)
        return tuple(spec for spec in self.fields if spec.qualified_key in chosen)

    def select(self, selectors: str | Iterable[str] | None) -> DatasetSchema:
        """A schema with only the fields :meth:`resolve` selects."""
        return DatasetSchema(self.resolve(selectors))

    # -- serialization -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The schema document: ``{"schema_version": 2, "fields": [...]}``, JSON-ready.

        Each field has ``key``, ``shape`` (a list), ``dtype``, ``role``, ``low``,
        ``high``, ``layout`` and ``optional``, as episodata 0.2 wrote them; a
        ``description`` or ``metadata`` is added only where a field has one.
        """
        fields = []
        for spec in self.fields:
            entry = spec.model_dump(mode="json", include=set(_POSITIONAL))
            entry = {name: entry[name] for name in _POSITIONAL}
            if spec.description:
                entry["description"] = spec.description
            if spec.metadata:
                entry["metadata"] = spec.model_dump(mode="json")["metadata"]
            fields.append(entry)
        return {"schema_version": SCHEMA_VERSION, "fields": fields}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> DatasetSchema:
        """Parse a schema document of :meth:`to_dict` (or one stored in a manifest).

        A document without ``schema_version`` is read as the current version.

        Raises
        ------
        SchemaError
            Another ``schema_version`` ("unsupported schema version"), or invalid fields.
        """
        if not isinstance(document, Mapping):
            raise SchemaError(f"a schema document is a mapping, got {type(document).__name__}")
        body = dict(document)
        version = body.pop("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise SchemaError(
                f"unsupported schema version {version!r}: this episodata reads version "
                f"{SCHEMA_VERSION}; a newer one needs a newer episodata (pip install -U "
                "episodata)"
            )
        try:
            return cls.model_validate(body)
        except ValidationError as err:
            raise _declaration_error("schema document", err, DatasetSchema) from err

    def to_json(self, *, indent: int | None = 2) -> str:
        """The :meth:`to_dict` document as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> DatasetSchema:
        """Parse JSON written by :meth:`to_json`, with or without ``schema_version``."""
        try:
            document = json.loads(text)
        except ValueError as err:
            raise SchemaError(f"a schema document must be JSON: {err}") from err
        return cls.from_dict(document)

    # -- inference -----------------------------------------------------------------------

    @classmethod
    def infer(
        cls, episode: Mapping[str, Any], *, alignment: Alignment | None = None
    ) -> DatasetSchema:
        """Infer a schema from one bulk episode dict (action-in or action-out).

        Dtypes are kept as given. Every ``uint8`` field of two or more dimensions gets
        ``0..255`` bounds, and those shaped like images (``[C, H, W]`` or ``[H, W, C]``
        with 1, 3 or 4 channels) a ``layout``. Info fields are optional.
        ``alignment`` is passed on as in :meth:`Dataset.add_episode`.
        """
        from episodata_core.normalize import split_episode

        split = split_episode(episode, schema=None, alignment=alignment)
        specs: list[FieldSpec] = []
        for role, fields in split.fields_by_role().items():
            for key, array in fields.items():
                specs.append(_infer_field(role, key, array))
        return cls(specs)


def _flat_keys(fields: Sequence[FieldSpec]) -> list[str]:
    """Each field's key where it is unique across roles, else its ``role/key``."""
    counts: dict[str, int] = {}
    for spec in fields:
        counts[spec.key] = counts.get(spec.key, 0) + 1
    return [spec.key if counts[spec.key] == 1 else spec.qualified_key for spec in fields]


def _field_by_key(fields: Sequence[FieldSpec], key: str) -> FieldSpec:
    """The field with flat key ``key`` (or ``role/key``); ambiguity names both roles."""
    matches = [spec for spec in fields if spec.key == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        roles = " and ".join(repr(spec.role) for spec in matches)
        raise FieldNotFoundError(
            f"field key {key!r} is in roles {roles}: ask for one with field(role, key) "
            f"or {matches[0].role + SEP + key!r}"
        )
    for spec in fields:
        if spec.qualified_key == key:
            return spec
    raise FieldNotFoundError(f"unknown field {key!r} (fields: {_flat_keys(fields)})")


def _selects(selector: str, spec: FieldSpec) -> bool:
    for name in (spec.key, spec.qualified_key):
        if name == selector or name.startswith(selector + "/"):
            return True
    return False


def _infer_field(role: Role, key: str, rows: np.ndarray[Any, Any]) -> FieldSpec:
    shape = tuple(int(n) for n in rows.shape[1:])
    try:
        dtype = _normalize_dtype(rows.dtype)
    except ValueError as err:
        raise SchemaError(f"{role} field {key!r}: {err}") from err
    # infos come and go between episodes (a success flag only at the end, say), so an
    # inferred info field may be absent from later episodes
    declared: dict[str, Any] = {"role": role, "optional": role == "info"}
    if rows.dtype == np.uint8 and len(shape) >= 2:
        # two or more uint8 axes are pixels (frames, masks, stacks), always 0..255
        declared.update(low=0, high=255, layout=_image_layout(shape))
    return FieldSpec(key, shape=shape, dtype=dtype, **declared)


def _image_layout(shape: tuple[int, ...]) -> str | None:
    if len(shape) != 3:
        return None
    if shape[0] in _IMAGE_CHANNELS and shape[2] not in _IMAGE_CHANNELS:
        return "CHW"
    if shape[2] in _IMAGE_CHANNELS:
        return "HWC"
    return None
