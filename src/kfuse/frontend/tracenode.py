"""The nodes of a traced function's expression graph (``frontend/trace.py``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import TraceError
from .sites import Site, user_site

RANK_WORDS = {0: "scalar", 1: "vector", 2: "matrix", 3: "csr"}   # 3: a CSR matrix (shape rows, cols)
TYPE_RANKS = {w: r for r, w in RANK_WORDS.items()}


class Node:
    """One operation of the traced function.  ``kind``: arg, lit, matvec, scale, add, outer, dot,
    bin, neg, sqrt, call, out, T; and ew (an elementwise operator or function of vectors and
    matrices, ``data`` its name in ``library/ewexpr.py``), bcast (a vector broadcast along a
    matrix's rows or columns, ``data`` "row" or "col", ``shape`` (n, 1) or (1, n)) and red (a
    reduction of a vector expression, ``data`` sum, max, min or mean).  ``uses`` counts the nodes
    (and returns) that read it: a node read once is fused into its reader's library call, one read more often is computed once.
    ``stretch``: the axes of ``shape`` of size 1 by broadcasting (a ``bcast``'s, and an elementwise
    expression's of them), which stretch to any size; an array's own size 1 does not.
    ``boolean``: NumPy's result would be an array of bools (a comparison, and the operations that
    keep bools bools), whose arithmetic differs from numbers' (``frontend/ewtrace.py``)."""
    __slots__ = ("kind", "rank", "args", "data", "site", "uses", "shape", "stretch", "boolean")

    def __init__(self, kind: str, rank: int, args: tuple = (), data: Any = None, site: Site | None = None,
                 shape: tuple[int, ...] = (), stretch: frozenset[int] = frozenset(), boolean: bool = False):
        self.kind, self.rank, self.args, self.data, self.shape = kind, rank, args, data, shape
        self.stretch, self.boolean = stretch, boolean
        self.site = site if site is not None else user_site()
        self.uses = 0
        for a in args:
            if isinstance(a, Node):
                a.uses += 1


def lit(x: float, site: Site | None = None) -> Node:
    x = float(x)
    if not math.isfinite(x):
        raise TraceError(f"the number {x} is not finite", site or user_site())
    return Node("lit", 0, data=x, site=site)


@dataclass(frozen=True)
class ArgSpec:
    """What tracing knows of an argument: ``kind`` array (rank 1 or 2), dscalar (a 0-d device
    array), scalar (a Python number) or csr (a CSR matrix; ``shape`` its rows, columns and
    non-zeros), and the shape of an array."""
    name: str
    kind: str
    shape: tuple[int, ...] = ()
