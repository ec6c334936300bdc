"""Gymnasium adapter for episodata.

Importing this package does not import gymnasium; the functions that need it do.
"""

from __future__ import annotations

from episodata_gym._rollouts import record_episodes
from episodata_gym._spaces import schema_from_gym_spaces

__all__ = ["record_episodes", "schema_from_gym_spaces"]

__version__ = "0.3.0"
