"""episodata: episodic data for world models, control and reinforcement learning.

This package only re-exports the public API of ``episodata_core``; names outside
``__all__`` may change without notice. The list of public names has one owner,
``episodata_core.__all__``: the star import takes exactly those names (type checkers
treat a star import as an explicit re-export), and ``__all__`` is that very list.
"""

from __future__ import annotations

from episodata_core import *  # the facade is exactly the core's public names
from episodata_core import __all__ as __all__
