"""Build a :class:`~episodata_core.schema.DatasetSchema` from Gymnasium spaces.

Gymnasium is imported inside the functions that need it, so this module (and
``import episodata_gym``) works without gymnasium installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import MissingDependencyError, SchemaError, UnsupportedSpaceError
from episodata_core.schema import DatasetSchema, FieldSpec

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import numpy.typing as npt
    from gymnasium.spaces import Box, Space

    from episodata_core.schema import Role

__all__ = ["schema_from_gym_spaces"]

SUPPORTED_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")

_IMAGE_CHANNELS = (1, 3, 4)
_INSTALL = 'pip install "episodata[gym]"'


def schema_from_gym_spaces(
    observation_space: Space[Any],
    action_space: Space[Any],
    *,
    reward_dtype: npt.DTypeLike = "float32",
    info_space: Space[Any] | None = None,
) -> DatasetSchema:
    """Build a dataset schema from an environment's observation and action spaces.

    A ``Box``, ``Discrete``, ``MultiDiscrete`` or ``MultiBinary`` space becomes one
    field keyed by its role (``"observation"``, ``"action"``), so the role reads back
    as a bare array. ``Dict`` and ``Tuple`` spaces become one field per leaf, keyed
    by the ``/``-joined path (``"sensors/lidar"``, ``"0"``, ``"arm/1"``). A scalar
    ``reward`` field is always added.

    Each field has the shape and dtype of ``space.sample()``: ``Box`` keeps its own
    shape and dtype; ``Discrete`` is ``[]`` int64; ``MultiDiscrete`` is ``nvec.shape``
    in its dtype (int64 by default); ``MultiBinary`` is its shape as int8. Bounds are
    kept where finite; ``uint8`` boxes shaped like images (``[C, H, W]`` or
    ``[H, W, C]`` with 1, 3 or 4 channels) also get a ``layout``.

    Parameters
    ----------
    observation_space, action_space
        The environment's ``observation_space`` and ``action_space``.
    reward_dtype
        Dtype of the scalar ``reward`` field.
    info_space
        A ``Dict`` space describing the ``info`` entries to store as info fields.

    Returns
    -------
    DatasetSchema
        Observation fields, action fields, ``reward``, then info fields.

    Raises
    ------
    SchemaError
        A (sub-)space has no fixed per-step shape (``Text``, ``Sequence``, ``Graph``,
        ``OneOf``, ...); the message names its path.
    MissingDependencyError
        Gymnasium is not installed.

    Examples
    --------
    >>> import gymnasium as gym
    >>> env = gym.make("CartPole-v1")
    >>> schema = schema_from_gym_spaces(env.observation_space, env.action_space)
    >>> [(f.role, f.key, f.shape, f.dtype) for f in schema]  # doctest: +NORMALIZE_WHITESPACE
    [('observation', 'observation', (4,), 'float32'), ('action', 'action', (), 'int64'),
     ('reward', 'reward', (), 'float32')]
    """
    _require_gymnasium()
    from gymnasium import spaces

    fields = [
        *_role_fields(observation_space, "observation"),
        *_role_fields(action_space, "action"),
        _reward_field(reward_dtype),
    ]
    if info_space is not None:
        if not isinstance(info_space, spaces.Dict):
            raise SchemaError(
                f"info_space must be a Dict space, like the info dict that env.step returns; "
                f"got {type(info_space).__name__}"
            )
        fields.extend(_role_fields(info_space, "info"))
    return DatasetSchema(fields)


def _require_gymnasium() -> None:
    try:
        importlib.import_module("gymnasium")
    except ImportError as err:
        if err.name == "gymnasium":
            message = f"schema_from_gym_spaces needs gymnasium: {_INSTALL}"
        else:
            # installed but broken: the cause is more useful than "not installed"
            message = (
                f"schema_from_gym_spaces needs gymnasium, which is installed but failed "
                f"to import ({err}); reinstall it: {_INSTALL}"
            )
        raise MissingDependencyError(message) from err


def _role_fields(space: Space[Any], role: Role) -> list[FieldSpec]:
    """Return the fields of one role; a non-composite space is one field keyed ``role``."""
    fields = list(_walk(space, role, ()))
    if not fields and role != "info":
        raise SchemaError(
            f"{role} space is an empty {type(space).__name__}: a dataset needs at least one "
            f"{role} field"
        )
    return fields


def _walk(space: Space[Any], role: Role, path: tuple[str, ...]) -> Iterator[FieldSpec]:
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        children: list[tuple[str, Space[Any]]] = []
        # gymnasium accepts any hashable key at runtime, whatever its annotation says
        items: Iterable[tuple[object, Space[Any]]] = space.spaces.items()
        for name, child in items:
            if not isinstance(name, str) or not name or "/" in name:
                raise SchemaError(
                    f"{_where(role, path)}: Dict key {name!r} cannot be a field key; use "
                    f"non-empty strings without '/', which joins nested keys"
                )
            children.append((name, child))
    elif isinstance(space, spaces.Tuple):
        children = [(str(i), child) for i, child in enumerate(space.spaces)]
    else:
        yield _leaf(space, role, path)
        return
    if path and not children:
        raise SchemaError(
            f"{_where(role, path)} is an empty {type(space).__name__}, which holds no data; "
            f"remove it from the space"
        )
    for name, child in children:
        yield from _walk(child, role, (*path, name))


def _leaf(space: Space[Any], role: Role, path: tuple[str, ...]) -> FieldSpec:
    from gymnasium import spaces

    key = "/".join(path) if path else role
    if isinstance(space, spaces.Box):
        return _box_field(space, role, key)
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return FieldSpec(
            key, shape=(), dtype="int64", role=role, low=start, high=start + int(space.n) - 1
        )
    if isinstance(space, spaces.MultiDiscrete):
        return FieldSpec(
            key,
            shape=space.shape,
            # the space's own dtype (int64 unless given), which is what sample() returns
            dtype=space.dtype,
            role=role,
            low=_bound(space.start),
            high=_bound(space.start + space.nvec - 1),
        )
    if isinstance(space, spaces.MultiBinary):
        return FieldSpec(key, shape=space.shape, dtype="int8", role=role, low=0, high=1)
    raise _unsupported(space, role, path)


def _box_field(space: Box, role: Role, key: str) -> FieldSpec:
    shape = tuple(int(n) for n in space.shape)
    # gymnasium refuses infinite bounds for unsigned boxes, so uint8 images always get
    # theirs (0 and 255 for the usual image box)
    layout = _image_layout(shape) if space.dtype == np.uint8 else None
    # integer boxes store an infinite bound as the dtype's extreme; bounded_* remembers
    low = _bound(space.low) if bool(np.all(space.bounded_below)) else None
    high = _bound(space.high) if bool(np.all(space.bounded_above)) else None
    return FieldSpec(
        key, shape=shape, dtype=space.dtype, role=role, layout=layout, low=low, high=high
    )


def _bound(values: npt.NDArray[Any]) -> float | list[Any]:
    """Return a bound as a Python scalar when uniform, else as a nested list (JSON-ready)."""
    flat = values.reshape(-1)
    if flat.size and bool(np.all(flat == flat[0])):
        scalar: float = flat[0].item()
        return scalar
    nested: list[Any] = values.tolist()
    return nested


def _image_layout(shape: tuple[int, ...]) -> str | None:
    # the same rule as DatasetSchema.infer, so a dataset built either way agrees
    if len(shape) != 3:
        return None
    if shape[0] in _IMAGE_CHANNELS and shape[2] not in _IMAGE_CHANNELS:
        return "CHW"
    if shape[2] in _IMAGE_CHANNELS:
        return "HWC"
    return None


def _reward_field(reward_dtype: npt.DTypeLike) -> FieldSpec:
    # np.dtype(None) is float64: refuse it rather than pick a dtype silently
    if reward_dtype is None:
        raise SchemaError('reward_dtype must be a numeric dtype such as "float32", got None')
    try:
        dtype = np.dtype(reward_dtype)
    except TypeError as err:
        raise SchemaError(
            f'reward_dtype {reward_dtype!r} is not a NumPy dtype; use e.g. "float32"'
        ) from err
    if dtype.kind not in "biuf":
        raise SchemaError(
            f'reward_dtype {reward_dtype!r} is not a numeric dtype; use e.g. "float32"'
        )
    return FieldSpec("reward", shape=(), dtype=dtype, role="reward")


def _where(role: Role, path: tuple[str, ...]) -> str:
    return f"{role} space {'/'.join(path)!r}" if path else f"{role} space"


def _unsupported(space: object, role: Role, path: tuple[str, ...]) -> UnsupportedSpaceError:
    from gymnasium import spaces

    if isinstance(space, spaces.Text):
        why = "its values are strings of varying length"
    elif isinstance(space, spaces.Sequence):
        why = "its values have a varying number of elements"
    elif isinstance(space, spaces.Graph):
        why = "its values have a varying number of nodes and edges"
    elif isinstance(space, spaces.OneOf):
        why = "its values come from a different sub-space on each step"
    elif isinstance(space, spaces.Space):
        why = "episodata does not know its per-step shape"
    else:
        why = "it is not a gymnasium space"
    return UnsupportedSpaceError(
        f"{_where(role, path)} is a {type(space).__name__}, which has no fixed per-step "
        f"shape and dtype: {why}. Supported spaces: {', '.join(SUPPORTED_SPACES)}. "
        f"Wrap the environment to convert it, or declare the schema with FieldSpec."
    )
