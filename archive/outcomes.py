"""What offering a program to a MAP-Elites cell did (the store's inserts, and migration's placements)."""
from __future__ import annotations

import enum


class Insert(str, enum.Enum):
    NEW_CELL = "new_cell"
    IMPROVED = "improved"
    NOT_ADDED = "not_added"
