"""``episodata.fields``: a role's fields as a mapping (0.2's module path).

0.2 called the mapping ``Fields``; :class:`FieldGroup` is the same thing here.
"""

from __future__ import annotations

from episodata_core.views import FieldGroup

Fields = FieldGroup

__all__ = ["FieldGroup", "Fields"]
