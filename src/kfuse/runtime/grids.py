"""Grid shapes of vector sizes, fixed at bind time from the arrays a program is called with.

A stencil (a library function declaring ``grid = 2`` or ``3``) needs the extents of the grid its
vectors are laid out on.  Vectors are grids in the size system: a vector's length is one size
(its dimension), and a program input passed as a C-contiguous 2-D or 3-D array gives that size
the array's shape, (ny, nx) or (nz, ny, nx), x fastest.  Other vectors of that size may come as
1-D arrays or in the same shape; results of that size are returned in it.  The kernels get the
extents as arguments (``codegen/grids.py``), filled once per binding.
"""
from __future__ import annotations

from ..errors import LaunchError
from ..ir.program import Program, Value

GRID_NDIMS = (2, 3)


def grid_shapes(prog: Program, shapes: dict[str, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """Dimension id -> grid shape, from the vector inputs passed as 2-D or 3-D arrays; two inputs
    of one size in different shapes are refused, naming both."""
    grids: dict[int, tuple[int, ...]] = {}
    origin: dict[int, str] = {}
    for v in prog.inputs:
        if v.type != "vector":
            continue
        shape = tuple(shapes[v.name])
        if len(shape) not in GRID_NDIMS:
            continue
        d = v.dims[0]
        if d in grids and grids[d] != shape:
            raise LaunchError(f"{v.name} has grid shape {shape}, but {origin[d]} has {grids[d]}: vectors of one "
                              "size share one grid (pass both in the same shape, or one of them 1-D)")
        grids[d] = shape
        origin[d] = v.name
    return grids


def flat_shapes(prog: Program, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The input shapes with every vector's grid shape replaced by its length (what the size
    system binds)."""
    out = dict(shapes)
    for v in prog.inputs:
        if v.type == "vector" and len(shapes[v.name]) in GRID_NDIMS:
            n = 1
            for s in shapes[v.name]:
                n *= s
            out[v.name] = (n,)
    return out


def extents(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(nx, ny, nz) of a grid shape (a 2-D grid has nz = 1)."""
    if len(shape) == 2:
        return shape[1], shape[0], 1
    return shape[2], shape[1], shape[0]


def fits(shape: tuple[int, ...], rank: int) -> bool:
    """Does a grid of this shape serve a stencil of this rank?  A 2-D stencil also takes a 3-D
    grid of one plane (nz = 1): @kfuse.jit reads a 2-D array as a matrix, so a 2-D grid comes to
    a jitted function as (1, ny, nx)."""
    return len(shape) == rank or (rank == 2 and len(shape) == 3 and shape[0] == 1)


def check_stencils(prog: Program, grids: dict[int, tuple[int, ...]]) -> None:
    """Every stencil call's grid inputs have a grid shape of its rank (before any GPU work)."""
    for c in prog.calls:
        fn = c.function
        if not fn.grid:
            continue
        for p, a in zip(fn.inputs, c.args):
            if p.reach != "neighbours" or not isinstance(a, Value):
                continue
            d = a.dims[0]
            shape = grids.get(d)
            want = "an (ny, nx)" if fn.grid == 2 else "an (nz, ny, nx)"
            if shape is None:
                same = [v.name for v in prog.inputs if v.type == "vector" and v.dims[0] == d]
                hint = (f"pass {' or '.join(same)} as {want} array" if same else
                        f"no input has {a.name}'s length to give it a shape")
                raise LaunchError(f"{fn.name} (line {c.line}) needs the grid's shape of {a.name}: {hint}")
            if not fits(shape, fn.grid):
                raise LaunchError(f"{fn.name} (line {c.line}) reads {a.name} as a {fn.grid}-D grid, but its size "
                                  f"has grid shape {shape}: pass {want} array")
