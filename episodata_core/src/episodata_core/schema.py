"""The dataset schema: one :class:`FieldSpec` per stored quantity, grouped by role.

The schema is authoritative once a dataset exists. It fixes each field's key, per-step
shape (no time or batch axis), dtype and role; storage layers and readers derive
everything else from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from episodata_core.errors import FieldNotFoundError, SchemaError

if TYPE_CHECKING:
    from typing import Self

    from episodata_core.normalize import Alignment

__all__ = ["ROLES", "DatasetSchema", "FieldSpec", "Role"]

Role = Literal["observation", "action", "reward", "info"]
ROLES: tuple[Role, ...] = get_args(Role)

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

    def __init__(self, key: str | None = None, /, **data: Any) -> None:
        # the README writes FieldSpec("camera", shape=...): accept the key positionally
        if key is not None:
            if "key" in data:
                raise TypeError("FieldSpec got the key both positionally and as key=")
            data["key"] = key
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


class DatasetSchema(BaseModel):
    """An ordered collection of :class:`FieldSpec` with keys unique within each role.

    ``DatasetSchema([FieldSpec("state", shape=(7,), dtype="float32"), ...])``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    fields: tuple[FieldSpec, ...] = Field(description="Fields in declaration order.")

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
                    f"duplicate {spec.role} field {spec.key!r}: keys must be unique within a role"
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

    def field(self, role: Role, key: str) -> FieldSpec:
        """Return the field ``key`` of ``role``."""
        for spec in self.fields:
            if spec.role == role and spec.key == key:
                return spec
        keys = [spec.key for spec in self.by_role(role)]
        raise FieldNotFoundError(f"no {role} field {key!r} (the {role} fields are {keys})")

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

    def to_json(self, *, indent: int | None = 2) -> str:
        """The schema as a JSON document."""
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> DatasetSchema:
        """Parse a schema written by :meth:`to_json`."""
        return cls.model_validate_json(text)

    # -- inference -----------------------------------------------------------------------

    @classmethod
    def infer(
        cls, episode: Mapping[str, Any], *, alignment: Alignment | None = None
    ) -> DatasetSchema:
        """Infer a schema from one bulk episode dict (action-in or action-out).

        Dtypes are kept as given. ``uint8`` arrays shaped like images (``[C, H, W]`` or
        ``[H, W, C]`` with 1, 3 or 4 channels) get ``layout`` and ``0..255`` bounds.
        ``alignment`` is passed on as in :meth:`Dataset.add_episode`.
        """
        from episodata_core.normalize import split_episode

        split = split_episode(episode, schema=None, alignment=alignment)
        specs: list[FieldSpec] = []
        for role, fields in split.fields_by_role().items():
            for key, array in fields.items():
                specs.append(_infer_field(role, key, array))
        return cls(specs)


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
    layout = _image_layout(shape) if rows.dtype == np.uint8 else None
    if layout is None:
        return FieldSpec(key, shape=shape, dtype=dtype, role=role)
    return FieldSpec(key, shape=shape, dtype=dtype, role=role, layout=layout, low=0, high=255)


def _image_layout(shape: tuple[int, ...]) -> str | None:
    if len(shape) != 3:
        return None
    if shape[0] in _IMAGE_CHANNELS and shape[2] not in _IMAGE_CHANNELS:
        return "CHW"
    if shape[2] in _IMAGE_CHANNELS:
        return "HWC"
    return None
