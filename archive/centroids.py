"""The centroids of a CVT archive: drawn once per run, stored in ``cvt_centroids``, read back on resume."""
from __future__ import annotations

import numpy as np
from sqlalchemy import insert, select

from archive import statements as sql
from evo.core.layouts import CVT, draw_centroids


def load_or_draw_centroids(c, descriptors: tuple, cells: int, seed: int) -> CVT | None:
    """The run's CVT layout (drawing and storing its centroids the first time), or None for a grid.

    Raises ValueError when the database's centroids do not fit ``cells`` and ``descriptors``:
    a run keeps its layout for its whole life.
    """
    rows = c.execute(select(sql.CENTROIDS.c.cell, sql.CENTROIDS.c.axis, sql.CENTROIDS.c.value)).all()
    if rows:
        stored = np.zeros((max(r[0] for r in rows) + 1, max(r[1] for r in rows) + 1))
        for cell, axis, value in rows:
            stored[cell, axis] = value
        if stored.shape != (cells, len(descriptors)):
            wanted = f"{cells} cells" if cells else "a grid"
            raise ValueError(f"this archive is a CVT of {stored.shape[0]} cells over {stored.shape[1]} descriptors, "
                           f"not {wanted} over {len(descriptors)}: resume it with the same archive.cvt_cells and "
                           "archive.descriptors")
        return CVT(descriptors, stored)
    if cells <= 0:
        if any(not d.bins for d in descriptors):
            raise ValueError("continuous descriptors need a CVT archive (archive.cvt_cells > 0)")
        return None
    if any(not hasattr(d, "low") for d in descriptors):
        raise ValueError("a CVT archive needs continuous descriptors (evo.core.descriptors.by_names(..., continuous=True))")
    centroids = draw_centroids(cells, len(descriptors), seed)
    c.execute(insert(sql.CENTROIDS), [dict(cell=i, axis=j, value=float(v))
                                      for i, row in enumerate(centroids) for j, v in enumerate(row)])
    return CVT(descriptors, centroids)
