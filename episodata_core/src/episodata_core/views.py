"""Transition-aligned views over row buffers: :class:`Segment` and :class:`Batch`.

A read of L transitions fetches L + 1 rows of every field once. Every role accessor is a
slice of those buffers along the time axis (data-model.md §2):

=====================  ==========  =====================================
accessor               rows        note
=====================  ==========  =====================================
``obs``, ``info``      ``[0, L)``  observation where the action was taken
``next_obs``           ``[1, L]``  overlaps ``obs``: one buffer, two views
``action``, ``reward`` ``[1, L]``  row 0 holds hidden zeros
``all_obs``            ``[0, L]``  the whole buffer
=====================  ==========  =====================================

Views never copy. :meth:`TransitionView.map` converts each buffer once and rebuilds the
views, so ``obs`` and ``next_obs`` still share storage after a device transfer.

A buffer that is a view of a dataset's storage (an episode read of the memory or npz
backend, ongoing episodes included) is read-only for NumPy, and so is every accessor
sliced from it; sampled batches are gathered into fresh, writable arrays of their own.
A writable buffer never shares memory with the dataset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from episodata_core.errors import FieldNotFoundError

if TYPE_CHECKING:
    from typing import Self

    from episodata_core.schema import DatasetSchema, FieldSpec, Role

__all__ = ["Batch", "FieldGroup", "Flags", "Segment", "Transition", "TransitionView"]

_Rows = Literal["current", "next", "all"]


class Flags:
    """Per-transition ``terminated``, ``truncated`` and ``mask`` arrays (bool, ``[..., L]``)."""

    __slots__ = ("mask", "terminated", "truncated")

    def __init__(self, terminated: Any, truncated: Any, mask: Any) -> None:
        self.terminated = terminated
        self.truncated = truncated
        self.mask = mask

    def map(self, fn: Callable[[Any], Any]) -> Flags:
        """Apply ``fn`` to each of the three arrays."""
        return Flags(fn(self.terminated), fn(self.truncated), fn(self.mask))

    def index(self, key: Any) -> Flags:
        """Index all three arrays with the same key."""
        return Flags(self.terminated[key], self.truncated[key], self.mask[key])


class FieldGroup(Mapping[str, Any]):
    """The fields of one role (or a ``/`` group within it) as a read-only mapping.

    ``group["camera"]``, ``group.camera``, ``group["keyboard/jump"]``,
    ``group.keyboard.jump`` and ``group["keyboard"]["jump"]`` all work. Iterating a
    role's group yields its fields' full ``/`` keys (``"keyboard/jump"``, the stable
    names), in schema order; iterating a nested group (``group.keyboard``) yields the
    names one level down. A role without fields (or whose fields were not read) is an
    empty group whose lookups say why.
    """

    __slots__ = ("_arrays", "_nested", "_path", "_why_empty")

    def __init__(
        self,
        arrays: Mapping[str, Any],
        path: str,
        *,
        nested: bool = False,
        why_empty: str = "",
    ) -> None:
        self._arrays = dict(arrays)
        self._path = path
        self._nested = nested
        self._why_empty = why_empty

    def __getitem__(self, key: str) -> Any:
        if key in self._arrays:
            return self._arrays[key]
        prefix = key + "/"
        members = {k[len(prefix) :]: v for k, v in self._arrays.items() if k.startswith(prefix)}
        if not members:
            raise FieldNotFoundError(self._missing(key))
        return FieldGroup(members, f"{self._path}/{key}", nested=True)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in FieldGroup.__slots__:
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(self._missing(name)) from None

    def _missing(self, key: str) -> str:
        message = f"{self._path} has no field or group {key!r}"
        if self._why_empty:
            return f"{message}: {self._why_empty}"
        return f"{message} (it has: {sorted(self._arrays)})"

    def __iter__(self) -> Iterator[str]:
        if not self._nested:
            return iter(self._arrays)
        seen: dict[str, None] = {}
        for key in self._arrays:
            seen.setdefault(key.split("/", 1)[0], None)
        return iter(seen)

    def __contains__(self, key: object) -> bool:
        # a group's name is in it too: "keyboard" in segment.action, as ["keyboard"] works
        if not isinstance(key, str):
            return False
        return key in self._arrays or any(k.startswith(key + "/") for k in self._arrays)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __dir__(self) -> Iterable[str]:
        return [*super().__dir__(), *{key.split("/", 1)[0]: None for key in self._arrays}]

    def flat(self) -> dict[str, Any]:
        """Every leaf under this group, keyed by its ``/`` path relative to the group."""
        return dict(self._arrays)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {_describe(v)}" for k, v in self._arrays.items())
        return f"FieldGroup({self._path}: {{{inner}}})"


class _Alias(property):
    """A read-only property that returns the view's attribute ``target`` itself."""

    def __init__(self, target: str) -> None:
        def get(view: TransitionView) -> Any:
            return getattr(view, target)

        get.__doc__ = f"Alias of :attr:`{target}`."
        super().__init__(get)
        self.target = target


class TransitionView:
    """Shared machinery of :class:`Segment`, :class:`Batch` and :class:`Transition`.

    ``buffers`` maps qualified field keys to arrays whose time axis (``time_axis``)
    holds L + 1 rows; ``flags`` holds ``[..., L]`` arrays. A view with ``squeezed``
    set has exactly one transition and drops its time axis from every accessor.
    """

    time_axis: int = 0
    squeezed: bool = False

    def __init__(
        self,
        schema: DatasetSchema,
        buffers: Mapping[str, Any],
        flags: Flags,
        *,
        split: int | None = None,
    ) -> None:
        self._schema = schema
        self._buffers = dict(buffers)
        self._flags = flags
        self._split = split

    # -- construction ---------------------------------------------------------------------

    def _replace(self, buffers: Mapping[str, Any], flags: Flags, split: int | None) -> Self:
        return type(self)(self._schema, buffers, flags, split=split)

    def map(self, fn: Callable[[Any], Any]) -> Self:
        """Apply ``fn`` once per underlying buffer and flag array; views are rebuilt.

        ``batch.map(lambda x: torch.as_tensor(x).to("cuda"))`` moves each buffer once,
        so ``obs`` and ``next_obs`` keep sharing memory on the device.
        """
        buffers = {key: fn(buffer) for key, buffer in self._buffers.items()}
        return self._replace(buffers, self._flags.map(fn), self._split)

    def select(self, fields: str | Iterable[str]) -> Self:
        """A view with only the fields selected by key, ``/`` group or ``role/key``."""
        present = self._schema.select([s.qualified_key for s in self._specs()])
        chosen = {spec.qualified_key for spec in present.resolve(fields)}
        buffers = {k: v for k, v in self._buffers.items() if k in chosen}
        return self._replace(buffers, self._flags, self._split)

    # -- plain properties -----------------------------------------------------------------

    @property
    def schema(self) -> DatasetSchema:
        """The dataset schema (all fields, including ones this view does not hold)."""
        return self._schema

    @property
    def buffers(self) -> Mapping[str, Any]:
        """The underlying ``[..., L + 1, ...]`` row buffers by qualified key (read-only)."""
        return self._buffers

    @property
    def fields(self) -> tuple[str, ...]:
        """Qualified keys of the fields this view holds."""
        return tuple(self._buffers)

    @property
    def terminated(self) -> Any:
        """``[..., L]`` bool: True only on an episode's final, terminated transition."""
        return self._flags.terminated

    @property
    def truncated(self) -> Any:
        """``[..., L]`` bool: True only on an episode's final, truncated transition."""
        return self._flags.truncated

    @property
    def mask(self) -> Any:
        """``[..., L]`` bool: True on real transitions, False on padding."""
        return self._flags.mask

    # -- roles; every alias returns the identical cached object ---------------------------

    @cached_property
    def obs(self) -> Any:
        """Observation where each action was taken: ``[..., L, ...]``."""
        return self._role("observation", "current")

    @cached_property
    def next_obs(self) -> Any:
        """Observation each action produced: ``[..., L, ...]``, a view overlapping ``obs``."""
        return self._role("observation", "next")

    @cached_property
    def all_obs(self) -> Any:
        """Every observation of the window: ``[..., L + 1, ...]``."""
        return self._role("observation", "all")

    @cached_property
    def action(self) -> Any:
        """Action taken at each transition: ``[..., L, ...]``."""
        return self._role("action", "next")

    @cached_property
    def reward(self) -> Any:
        """Reward each action earned: ``[..., L, ...]``."""
        return self._role("reward", "next")

    @cached_property
    def info(self) -> Any:
        """Info of the observation where each action was taken: ``[..., L, ...]``."""
        return self._role("info", "current")

    @cached_property
    def next_info(self) -> Any:
        """Info of the observation each action produced: ``[..., L, ...]``."""
        return self._role("info", "next")

    @cached_property
    def all_infos(self) -> Any:
        """Every info of the window: ``[..., L + 1, ...]``."""
        return self._role("info", "all")

    # other spellings of the role views above, each returning the identical object;
    # one line each so that type checkers know every name (see ALIASES)
    observation = _Alias("obs")
    observations = _Alias("obs")
    next_observation = _Alias("next_obs")
    next_observations = _Alias("next_obs")
    all_observations = _Alias("all_obs")
    actions = _Alias("action")
    rewards = _Alias("reward")
    infos = _Alias("info")
    next_infos = _Alias("next_info")

    # -- context / target -----------------------------------------------------------------

    @cached_property
    def context(self) -> Self:
        """Transitions ``[0, C)`` of a context/target read; shares its last row with target."""
        return self._window(0, self._split_point("context"))

    @cached_property
    def target(self) -> Self:
        """Transitions ``[C, C + K)`` of a context/target read."""
        return self._window(self._split_point("target"), None)

    def _split_point(self, what: str) -> int:
        if self._split is None:
            raise AttributeError(
                f"this {type(self).__name__} has no {what}: read it with "
                "context_length= and target_length="
            )
        return self._split

    def _window(self, start: int, stop: int | None) -> Self:
        # transitions [start, stop) need rows [start, stop]; the boundary row is shared
        row_stop = None if stop is None else stop + 1
        buffers = {k: v[self._time(slice(start, row_stop))] for k, v in self._buffers.items()}
        return self._replace(buffers, self._flags.index(self._time(slice(start, stop))), None)

    # -- helpers --------------------------------------------------------------------------

    def _time(self, index: slice | int) -> tuple[slice | int, ...]:
        return (*(slice(None),) * self.time_axis, index)

    def _specs(self) -> list[FieldSpec]:
        return [self._schema[key] for key in self._buffers]

    def _role(self, role: Role, rows: _Rows) -> Any:
        index = (_SQUEEZED_ROWS if self.squeezed else _ROWS)[rows]
        key = self._time(index)
        arrays = {
            spec.key: self._buffers[spec.qualified_key][key]
            for spec in self._specs()
            if spec.role == role
        }
        if not arrays:
            # an empty mapping, as for a role without fields: code that reads every
            # role skips empty ones; a lookup in it explains what is missing
            declared = [spec.key for spec in self._schema.by_role(role)]
            why = (
                f"this {type(self).__name__} holds no {role} field (schema {role} fields: "
                f"{declared}; read: {list(self._buffers)}); select them with fields="
            )
            return FieldGroup({}, _ROLE_NAMES[role][rows], why_empty=why)
        if self._schema.is_bare(role):
            return arrays[role]
        return FieldGroup(arrays, _ROLE_NAMES[role][rows])

    def __getstate__(self) -> dict[str, Any]:
        # cached role views would pickle as arrays of their own: obs and next_obs would
        # arrive as two copies that no longer overlap. They are rebuilt on access instead
        return {k: v for k, v in self.__dict__.items() if k not in _CACHED_VIEWS}

    def __repr__(self) -> str:
        # shapes as the accessors give them (transitions, not buffer rows): the L + 1 rows
        # of an observation or info buffer are obs and next_obs, shown as "+1 row"
        parts = [self._count()]
        for key, buffer in self._buffers.items():
            shape = getattr(buffer, "shape", None)
            if shape is None:
                parts.append(f"{key}: {type(buffer).__name__}")
                continue
            shape = list(shape)
            if self.squeezed:
                del shape[self.time_axis]
                more = ""
            else:
                shape[self.time_axis] -= 1
                more = " +1 row" if self._schema[key].role in ("observation", "info") else ""
            parts.append(f"{key}: {getattr(buffer, 'dtype', '')}{shape}{more}")
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            padded = int((~self._flags.mask).sum())
            if padded:
                parts.append(f"padded: {padded}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _count(self) -> str:
        """How many transitions, in the shape of the flags: ``5``, ``4 x 8``."""
        dims = [int(n) for n in getattr(self._flags.mask, "shape", ())]
        total = 1
        for n in dims:
            total *= n
        layout = " x ".join(str(n) for n in dims) if len(dims) > 1 else str(total)
        return f"{layout} transition{'' if total == 1 and len(dims) < 2 else 's'}"


ALIASES: dict[str, str] = {
    name: value.target for name, value in vars(TransitionView).items() if isinstance(value, _Alias)
}
"""Each alias attribute of the views and the role view it returns (``"observations": "obs"``)."""

_CACHED_VIEWS = frozenset(
    name for name, value in vars(TransitionView).items() if isinstance(value, cached_property)
)

_ROWS: dict[str, slice | int] = {
    "current": slice(0, -1),
    "next": slice(1, None),
    "all": slice(None),
}
_SQUEEZED_ROWS: dict[str, slice | int] = {"current": 0, "next": 1, "all": slice(None)}

_ROLE_NAMES: dict[str, dict[str, str]] = {
    "observation": {"current": "obs", "next": "next_obs", "all": "all_obs"},
    "action": {"current": "action", "next": "action", "all": "action"},
    "reward": {"current": "reward", "next": "reward", "all": "reward"},
    "info": {"current": "info", "next": "next_info", "all": "all_infos"},
}


class Segment(TransitionView):
    """L consecutive transitions of one episode; buffers are ``[L + 1, ...]``."""

    time_axis = 0

    def __len__(self) -> int:
        """L, the number of transitions."""
        return int(self._flags.mask.shape[0])


class Batch(TransitionView):
    """B segments stacked on a leading axis; buffers are ``[B, L + 1, ...]``."""

    time_axis = 1

    def __len__(self) -> int:
        """B, the number of segments."""
        return int(self._flags.mask.shape[0])

    @property
    def batch_size(self) -> int:
        """B."""
        return len(self)

    @property
    def sequence_length(self) -> int:
        """L, the number of transitions per segment."""
        return int(self._flags.mask.shape[1])


class Transition(TransitionView):
    """One transition (or ``[B]`` of them) with the time axis removed.

    Buffers hold the two rows a transition touches: ``obs`` is row 0 and ``next_obs``
    row 1 of the same buffer.
    """

    squeezed = True

    def __init__(
        self,
        schema: DatasetSchema,
        buffers: Mapping[str, Any],
        flags: Flags,
        *,
        split: int | None = None,
        batched: bool = False,
    ) -> None:
        super().__init__(schema, buffers, flags, split=split)
        self.time_axis = 1 if batched else 0

    def _replace(self, buffers: Mapping[str, Any], flags: Flags, split: int | None) -> Self:
        return type(self)(self._schema, buffers, flags, split=split, batched=self.time_axis == 1)

    def __len__(self) -> int:
        """B for a batch of transitions; a single transition has no length."""
        if self.time_axis == 0:
            raise TypeError("a single Transition has no len(); it is one transition")
        return int(self._flags.mask.shape[0])


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None:
        return type(value).__name__
    return f"{dtype}{list(shape)}"
