"""``batch_to_tensordict``: a Batch as a TensorDict that keeps observations on one storage.

Keys are the 0.2 names (``observation``, ``next_observation``, ``action``, ``reward``,
``info``, ``next_info``, ``terminated``, ``truncated``, ``mask``; ``all_observations``
and ``all_infos`` on request), which are also TorchRL's. ``layout="torchrl"`` nests
what follows an action under ``"next"`` as TorchRL's collectors and replay buffers do.
The reverse, TorchRL collector output to episodes, is :mod:`episodata_torch._torchrl`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from episodata_core.errors import MissingDependencyError, SchemaError

if TYPE_CHECKING:
    from episodata_core.views import TransitionView

__all__ = ["batch_to_tensordict"]

Layout = Literal["flat", "torchrl"]

# TensorDict key -> role accessor of a batch; each has one entry per transition
_PER_TRANSITION = (
    ("observation", "obs"),
    ("next_observation", "next_obs"),
    ("action", "action"),
    ("reward", "reward"),
    ("info", "info"),
    ("next_info", "next_info"),
)
_FLAGS = ("terminated", "truncated", "mask")
_ALIGNMENTS = {"action_in": "action-in", "action-in": "action-in", "action_out": "action-out",
               "action-out": "action-out"}  # fmt: skip


def _import_torch() -> tuple[Any, Any]:
    try:
        import tensordict
        import torch
    except ImportError as err:
        raise MissingDependencyError(
            f"batch_to_tensordict needs torch and tensordict ({err.name} is missing): "
            'pip install "episodata[torch]"'
        ) from err
    return torch, tensordict


def batch_to_tensordict(
    batch: TransitionView,
    device: Any = None,
    include_all_observations: bool = False,
    alignment: str | None = None,
    layout: Layout = "flat",
) -> Any:
    """Convert a batch to a :class:`tensordict.TensorDict` on ``device``.

    Each row buffer is converted and moved once, then sliced, so ``observation`` and
    ``next_observation`` stay views of one storage on the device (moving the TensorDict
    later copies them separately). Dict-shaped roles become nested TensorDicts.

    Parameters
    ----------
    batch
        A :class:`~episodata_core.views.Batch` of segments (``[B, L, ...]``), a segment
        (``[L, ...]``) or sampled transitions (``[B, ...]``).
    device
        Where the tensors go (``"cuda"``); ``None`` keeps them on the CPU.
    include_all_observations
        Also return ``all_observations`` (and ``all_infos``), the ``L + 1`` rows of the
        observation buffer. The entries then differ in length, so the batch size is
        ``[B]`` (``[]`` for one segment; transitions stay ``[B]``, with the two rows each
        touches).
    alignment
        ``"action_in"`` or ``"action_out"`` (``"action-in"``/``"action-out"`` too):
        every entry gets ``L + 1`` rows, batch size ``[B, L + 1]``. ``observation`` (and
        ``info``) is the real ``L + 1`` row buffer; ``action``, ``reward``,
        ``terminated``, ``truncated`` and ``mask`` get one zero placeholder row, first
        for action-in, last for action-out. There is no ``next_observation``. Cannot be
        combined with ``include_all_observations``; needs a time axis.
    layout
        ``"flat"``: the keys above at the top level. ``"torchrl"``: TorchRL's layout, so a
        batch goes into a TorchRL replay buffer as it is: ``observation``, ``action``,
        ``info``, ``mask`` and ``done``/``terminated``/``truncated`` (all false: no
        transition of a segment starts at an episode's end) at the top, and
        ``("next", "observation")``, ``("next", "reward")``, ``("next", "info")``,
        ``("next", "done")`` (terminated or truncated), ``("next", "terminated")``,
        ``("next", "truncated")``. Flags have TorchRL's trailing ``1`` axis
        (``[B, L, 1]``) and the reward too. ``alignment`` does not apply to it.

    Returns
    -------
    tensordict.TensorDict
        Batch size ``[B, L]`` for segments and ``[B]`` for transitions unless a parameter
        above says otherwise.

    Notes
    -----
    The tensors never share memory with the dataset, so in-place tensor ops are safe.
    A buffer that is a read-only NumPy array may be a view of storage (an episode
    read, a segment): it is copied on the host first. A writable one is a private
    copy already (every sampled batch is gathered into fresh arrays; the backend
    contract says so) and is wrapped without copying.

    Examples
    --------
    >>> td = batch_to_tensordict(stream.sample(), device="cuda")  # doctest: +SKIP
    >>> td["observation", "camera"].shape  # doctest: +SKIP
    torch.Size([64, 32, 3, 64, 64])
    """
    aligned = _check_options(batch, include_all_observations, alignment, layout)
    torch, tensordict = _import_torch()

    def convert(array: Any) -> Any:
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            # torch cannot make a tensor read-only: sharing this memory would let an
            # in-place op change every later read of the dataset
            array = array.copy()
        return torch.as_tensor(array, device=device)

    moved = batch.map(convert)
    roles: dict[str, Any] = {}
    for name, accessor in _PER_TRANSITION:
        value = _nested(getattr(moved, accessor))
        if isinstance(value, dict) and not value:
            continue  # the batch holds no field of this role (an empty mapping)
        roles[name] = value
    flags = {name: getattr(moved, name) for name in _FLAGS}
    batch_size = list(moved.mask.shape)
    if aligned is not None:
        return _aligned(torch, tensordict, moved, roles, flags, aligned, device)
    if layout == "torchrl":
        return _torchrl(torch, tensordict, roles, flags, batch_size, device)
    source: dict[str, Any] = {**flags, **roles}
    if include_all_observations:
        source["all_observations"] = _nested(moved.all_obs)
        all_infos = _nested(moved.all_infos)
        if not (isinstance(all_infos, dict) and not all_infos):  # an empty mapping: no infos
            source["all_infos"] = all_infos
        if not getattr(batch, "squeezed", False):
            batch_size = batch_size[:-1]  # L + 1 rows beside L: only [B] is common to all
    return tensordict.TensorDict(source, batch_size=batch_size, device=device)


def _check_options(
    batch: TransitionView, include_all: bool, alignment: str | None, layout: str
) -> str | None:
    """Validate the option combination before anything is converted; the alignment."""
    if layout not in ("flat", "torchrl"):
        raise SchemaError(f"layout must be 'flat' or 'torchrl', got {layout!r}")
    if alignment is None and not include_all:
        return None
    if include_all and layout != "flat":
        raise SchemaError(
            "include_all_observations applies to layout='flat' only: TorchRL's layout keeps "
            "each step's observation and ('next', 'observation')"
        )
    # sampled transitions have their time axis squeezed away
    time_axis = not getattr(batch, "squeezed", False)
    if alignment is not None:
        if alignment not in _ALIGNMENTS:
            raise SchemaError(
                f"alignment must be 'action_in' or 'action_out' (or 'action-in'/'action-out'), "
                f"got {alignment!r}"
            )
        if include_all:
            raise SchemaError(
                "alignment cannot be combined with include_all_observations: an aligned "
                "TensorDict already holds all L + 1 observations as 'observation'"
            )
        if layout != "flat":
            raise SchemaError("alignment applies to layout='flat' only")
    if alignment is not None and not time_axis:
        raise SchemaError(
            "alignment needs a time axis, and these transitions have none; sample segments "
            "(segment_stream) instead"
        )
    return None if alignment is None else _ALIGNMENTS[alignment]


def _aligned(
    torch: Any,
    tensordict: Any,
    moved: Any,
    roles: dict[str, Any],
    flags: dict[str, Any],
    alignment: str,
    device: Any,
) -> Any:
    """``L + 1`` rows per entry: the real observation buffer, one placeholder elsewhere."""
    time = moved.mask.dim() - 1

    def padded(tensor: Any) -> Any:
        shape = list(tensor.shape)
        shape[time] = 1
        zero = torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)
        pieces = (zero, tensor) if alignment == "action-in" else (tensor, zero)
        return torch.cat(pieces, dim=time)

    source: dict[str, Any] = {"observation": _nested(moved.all_obs)}
    all_infos = _nested(moved.all_infos)
    if not (isinstance(all_infos, dict) and not all_infos):  # an empty mapping: no infos
        source["info"] = all_infos
    for name in ("action", "reward"):
        if name in roles:
            source[name] = _map_leaves(roles[name], padded)
    for name, flag in flags.items():
        source[name] = padded(flag)
    batch_size = list(source["mask"].shape)
    return tensordict.TensorDict(source, batch_size=batch_size, device=device)


def _torchrl(
    torch: Any,
    tensordict: Any,
    roles: dict[str, Any],
    flags: dict[str, Any],
    batch_size: list[int],
    device: Any,
) -> Any:
    """TorchRL's nesting: what follows the action under ``"next"``, flags ``[..., 1]``."""
    terminated, truncated = flags["terminated"][..., None], flags["truncated"][..., None]
    following: dict[str, Any] = {
        "done": terminated | truncated,
        "terminated": terminated,
        "truncated": truncated,
    }
    if "next_observation" in roles:
        following["observation"] = roles["next_observation"]
    if "reward" in roles:
        reward = roles["reward"]
        following["reward"] = reward[..., None] if isinstance(reward, torch.Tensor) else reward
    if "next_info" in roles:
        following["info"] = roles["next_info"]
    # no segment or transition starts at an episode's end: the state before it is never done
    not_done = torch.zeros_like(terminated)
    source: dict[str, Any] = {
        "done": not_done,
        "terminated": not_done.clone(),
        "truncated": not_done.clone(),
        "mask": flags["mask"],
        "next": tensordict.TensorDict(following, batch_size=batch_size, device=device),
    }
    for name in ("observation", "action", "info"):
        if name in roles:
            source[name] = roles[name]
    return tensordict.TensorDict(source, batch_size=batch_size, device=device)


def _map_leaves(value: Any, function: Any) -> Any:
    if isinstance(value, dict):
        return {key: _map_leaves(item, function) for key, item in value.items()}
    return function(value)


def _nested(value: Any) -> Any:
    flat = getattr(value, "flat", None)
    if flat is None:
        return value
    tree: dict[str, Any] = {}
    for key, tensor in flat().items():
        *groups, leaf = key.split("/")
        node = tree
        for group in groups:
            node = node.setdefault(group, {})
        node[leaf] = tensor
    return tree
