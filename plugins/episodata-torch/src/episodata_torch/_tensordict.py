"""``batch_to_tensordict``: a Batch as a TensorDict that keeps obs/next_obs on one storage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import MissingDependencyError

if TYPE_CHECKING:
    from episodata_core.views import TransitionView

__all__ = ["batch_to_tensordict"]

# role accessors that have one entry per transition, so they fit the [B, L] batch size
_PER_TRANSITION = ("obs", "next_obs", "action", "reward", "info", "next_info")


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


def batch_to_tensordict(batch: TransitionView, device: Any = None) -> Any:
    """Convert a batch to a :class:`tensordict.TensorDict` on ``device``.

    Each row buffer is converted and moved once, then sliced, so ``obs`` and
    ``next_obs`` stay views of one storage on the device (moving the TensorDict later
    copies them separately). Keys are the role names (``obs``, ``next_obs``,
    ``action``, ``reward``, ``info``, ``next_info``, ``terminated``, ``truncated``,
    ``mask``); dict-shaped roles become nested TensorDicts. The batch size is ``[B, L]``
    for segments and ``[B]`` for transitions.

    The tensors never share memory with the dataset, so in-place tensor ops are safe.
    A buffer that is a read-only NumPy array may be a view of storage (an episode
    read, a segment): it is copied on the host first. A writable one is a private
    copy already (every sampled batch is gathered into fresh arrays; the backend
    contract says so) and is wrapped without copying.
    """
    torch, tensordict = _import_torch()

    def convert(array: Any) -> Any:
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            # torch cannot make a tensor read-only: sharing this memory would let an
            # in-place op change every later read of the dataset
            array = array.copy()
        return torch.as_tensor(array, device=device)

    moved = batch.map(convert)
    flags = {"terminated": moved.terminated, "truncated": moved.truncated, "mask": moved.mask}
    batch_size = list(moved.mask.shape)
    source: dict[str, Any] = dict(flags)
    for name in _PER_TRANSITION:
        try:
            value = getattr(moved, name)
        except AttributeError:
            continue  # the batch holds no field of this role
        source[name] = _nested(value)
    return tensordict.TensorDict(source, batch_size=batch_size, device=device)


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
