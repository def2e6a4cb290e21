"""A stencil's fields in a function table (``grid``, ``boundary``, ``radius``), checked at load
(see docs/library-format.md, "Stencils")."""
from __future__ import annotations

from .schema import BOUNDARIES, GRID_RANKS, MAX_RADIUS, Param


def stencil_fields(ctx, t: dict, where: str, kind: str, params: tuple[Param, ...]) -> tuple[int, str, int]:
    """(grid, boundary, radius) of a stencil: a map whose inputs declared reach = "neighbours"
    are read as a 2-D or 3-D grid (their routines get a ``KfGrid2``/``KfGrid3`` view with the
    boundary rule compiled in).  A function without ``grid`` takes neither of the others."""
    if "grid" not in t:
        for key in ("boundary", "radius"):
            if key in t:
                raise ctx.fail(f"{where}.{key}", "only a stencil (a function declaring grid = 2 or 3) has one")
        return 0, "zero", 0
    grid = ctx.get(t, "grid", where, int)
    if grid not in GRID_RANKS:
        raise ctx.fail(f"{where}.grid", f"{grid} is not one of {', '.join(map(str, GRID_RANKS))} (the grid's rank)")
    if kind != "map":
        raise ctx.fail(f"{where}.grid", f"a stencil is a map over the grid's points, not a {kind}")
    if not any(p.reach == "neighbours" for p in params):
        raise ctx.fail(f"{where}.grid", "a stencil reads at least one input around its point: declare it "
                       "reach = \"neighbours\"")
    bad = [p.name for p in params if p.reach == "any"]
    if bad:
        raise ctx.fail(f"{where}.grid", f"{bad[0]} declares reach = \"any\"; a stencil's inputs are read "
                       "around their point (\"neighbours\") or at it (\"element\")")
    boundary = ctx.get(t, "boundary", where, str, "zero")
    if boundary not in BOUNDARIES:
        raise ctx.fail(f"{where}.boundary", f"{boundary!r} is not one of {', '.join(BOUNDARIES)}")
    radius = ctx.get(t, "radius", where, int, 1)
    if not 1 <= radius <= MAX_RADIUS:
        raise ctx.fail(f"{where}.radius", f"{radius}: a stencil reads 1 to {MAX_RADIUS} points away along each axis")
    return grid, boundary, radius
