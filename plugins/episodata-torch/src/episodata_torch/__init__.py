"""PyTorch and TensorDict interop for episodata batches.

``import episodata_torch`` does not import torch; the functions do, when called.
"""

from __future__ import annotations

from episodata_torch._tensordict import batch_to_tensordict
from episodata_torch._torchrl import tensordict_to_episodes

__all__ = ["batch_to_tensordict", "tensordict_to_episodes"]

__version__ = "0.3.0"
