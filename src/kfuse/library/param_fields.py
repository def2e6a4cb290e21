"""Parameter fields of the library format for inputs read beyond their element: ``reach`` (a
csr matrix is always read through its global view) and ``size`` (an input that follows no
instance axis takes its sizes from other parameters: a sparse mat-vec's x is as long as A has
columns)."""
from __future__ import annotations

import re

from .schema import REACHES

SIZE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.(len|rows|cols)")
WORDS = {"vector": ("len",), "matrix": ("rows", "cols"), "csr": ("rows", "cols")}


def size_field(ctx, p: dict, where: str, ptype: str, direction: str, index: tuple) -> tuple[str, ...]:
    """The ``size`` field (empty when absent), and the csr type's index rule."""
    size = tuple(ctx.get(p, "size", where, list, []))
    if size and (not all(isinstance(s, str) and SIZE_REF.fullmatch(s) for s in size)
                 or len(size) != {"vector": 1, "matrix": 2}.get(ptype, -1) or index):
        raise ctx.fail(f"{where}.size", "a vector (one) or matrix (two) input with index = [] gives its sizes "
                       "as dimensions of other parameters: \"A.cols\", \"x.len\", \"B.rows\"")
    if ptype == "csr" and (direction != "in" or index != ("i",)):
        raise ctx.fail(f"{where}.index", "a csr matrix is an input whose rows follow axis i: index = [\"i\"]")
    return size


def reach_field(ctx, p: dict, where: str, ptype: str, size: tuple[str, ...], element_only: bool) -> str:
    """The ``reach`` field: one of REACHES, "element" for outputs, scalars and partial sums
    (``element_only``), "any" for a csr matrix (its default), not "element" for an input with
    ``size`` (it follows no instance axis, so it has no element)."""
    reach = ctx.get(p, "reach", where, str, "any" if ptype == "csr" else "element")
    if reach not in REACHES:
        raise ctx.fail(f"{where}.reach", f"{reach!r} is not one of {', '.join(REACHES)}")
    if reach != "element" and element_only:
        raise ctx.fail(f"{where}.reach", "only vector or matrix inputs (not partial sums) are read beyond "
                       "their element")
    if ptype == "csr" and reach != "any":
        raise ctx.fail(f"{where}.reach", "a csr matrix is read through its global view only: reach = \"any\"")
    if size and reach == "element":
        raise ctx.fail(f"{where}.size", "only inputs read beyond their element (reach = \"neighbours\" or "
                       "\"any\") follow no instance axis")
    return reach


def check_sizes(ctx, params, where: str) -> None:
    """Every ``size`` names a dimension of another parameter that follows the instance axes."""
    for p in params:
        for ref in p.size:
            other, word = ref.split(".")
            q = next((q for q in params if q.name == other and q is not p), None)
            if q is None or word not in WORDS.get(q.type, ()) or q.size:
                raise ctx.fail(f"{where}.params.{p.name}.size", f"{ref}: not a dimension of another parameter "
                               "that follows the instance axes")
