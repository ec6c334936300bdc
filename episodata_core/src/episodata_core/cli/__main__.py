"""``python -m episodata_core.cli``."""

from __future__ import annotations

from episodata_core.cli import main

raise SystemExit(main())
