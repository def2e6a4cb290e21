"""Stencils' grid views in generated kernels.

A stencil (a library function declaring ``grid = 2`` or ``3``) reads its ``reach = "neighbours"``
inputs through a grid view (``KfGrid2``/``KfGrid3`` of the prelude, the boundary rule a template
argument) instead of the flat ``KfVec``.  The grid's extents are not known when the kernel is
generated: the kernel takes them as three more parameters per such value (``<value>_nx``, ``_ny``,
``_nz``: a 2-D grid has nz = 1), after the arrays, and the binding fills them from the shape of
the arrays the program is called with (``runtime/grids.py``).  Kernels without stencils are
unchanged.
"""
from __future__ import annotations

from ..ir.kernel import GlobalArg
from ..ir.program import Value

EXTENTS = ("nx", "ny", "nz")


def plain_reads(steps) -> set[int]:
    """Ids of the values the kernel's routine steps take through plain global views (``KfVec``,
    ``KfMat``: every global argument but a stencil's grid reads)."""
    out: set[int] = set()
    for s in steps:
        r = s.routine
        if r is None:
            continue
        fn = s.kc.call.function
        binds = s.kc.call.bindings()
        out |= {binds[a.name].id for a in r.args if a.kind == "global"
                and not (fn.grid and fn.param_map[a.name].reach == "neighbours")}
    return out


def grid_reads(steps) -> list[tuple[Value, int, str]]:
    """(value, grid rank, boundary rule) of each grid view the kernel's routine steps read, in
    order of first use, each once."""
    found: dict[tuple[int, int, str], tuple[Value, int, str]] = {}
    for s in steps:
        r = s.routine
        if r is None or r.kind != "compute":
            continue
        fn = s.kc.call.function
        if not fn.grid:
            continue
        binds = s.kc.call.bindings()
        for a in r.args:
            if a.kind == "global" and fn.param_map[a.name].reach == "neighbours":
                v = binds[a.name]
                found.setdefault((v.id, fn.grid, fn.boundary), (v, fn.grid, fn.boundary))
    return list(found.values())


def grid_args(steps) -> list[GlobalArg]:
    """The kernel's extents arguments: one ``grid`` argument (three 64-bit extents) per value read
    as a grid, whatever its rank and boundary rule."""
    seen: dict[int, GlobalArg] = {}
    for v, _, _ in grid_reads(steps):
        if v.id not in seen:
            seen[v.id] = GlobalArg("grid", v.label, v, axis=3)
    return list(seen.values())


def grid_params(label: str) -> list[str]:
    """The kernel parameters of a value's extents."""
    return [f"long long {label}_{e}" for e in EXTENTS]


def view_name(label: str, rank: int, boundary: str) -> str:
    return f"g{rank}{boundary}_{label}"


def view_decl(label: str, rank: int, boundary: str) -> str:
    """The grid view of a value, as the routines that read it as a grid get it."""
    extents = ", ".join(f"{label}_{e}" for e in EXTENTS[:rank])
    return (f"    const KfGrid{rank}<KF_{boundary.upper()}> {view_name(label, rank, boundary)}{{{label}_p, {extents}}};"
            f"   // {label} as a {rank}-D grid, x fastest; past the edges: {boundary}")
