"""episodata's benchmark harness: workloads W1-W9 against ceilings and peers.

Run it with ``uv run --group bench python -m benchmarks`` (see ``benchmarks/README.md``).
Every figure is measured in one run on one machine; the table reports ratios against the
targets of ``docs/performance.md``.
"""

from __future__ import annotations

__all__: list[str] = []
