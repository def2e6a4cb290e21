"""Halo recompute: a stencil after a stencil (or after a map) in one kernel.

A stencil reads its ``reach = "neighbours"`` inputs around each point, so a value made by another
call of the same kernel is not complete there: other blocks make the neighbours (``GatherBarrier``).
When that producer P is a map whose output at any point can be computed from what is already in
global memory (P's inputs are kernel inputs or earlier kernels' results, none made in the kernel;
P reads nothing "anywhere"), the kernel evaluates P at the points the stencil reads instead of
reading its output: P's own reads then reach one radius further.  The stencil's routine gets a
*halo view* (``codegen/grids.py``: a struct with the grid view's interface whose ``ld``/``quad``
run P's routines of its ``point_variant`` at the 4 entries around the point) in place of the grid
view.  The rules here are shared by the legality rule (``fusion/legality.py``), the code generator
and the cost model (docs/library-format.md, "Stencils").
"""
from __future__ import annotations

from typing import Sequence

from ..library.schema import Function, Variant
from .kernel import KernelCall
from .program import Call, Value


def point_variant(fn: Function) -> Variant | None:
    """The variant of a map that evaluates it at any 4 consecutive entries by itself: 8 x 1 threads
    of 4 consecutive entries each (mapping "quad" for every element, as the stencils' and BLAS-1's
    ``quad``), no macros, no locals, no lanes exchanged, loads, computes and stores only; None when
    it has none."""
    if fn.kind != "map" or fn.nesting != 1 or len(fn.outputs) != 1:
        return None
    for v in fn.variants:
        if (tuple(v.threads) != (8, 1) or v.macros or v.locals or v.whole or v.cluster or v.warp_wide
                or v.triangle):
            continue
        if any(r.kind not in ("load", "compute", "store") or tuple(r.threads) != (8, 1) for r in v.routines):
            continue
        if all(a.mapping == "quad" for r in v.routines for a in r.args if a.kind == "element"):
            return v
    return None


def why_not_recomputed(prod: Call, cons: Call, reach: str) -> str | None:
    """Why the value ``prod`` makes, read by ``cons`` beyond its element (``reach``), cannot be
    recomputed across the halo whatever the kernel; None when it can (given that no input of
    ``prod`` is made in the kernel: ``inputs_made_inside``)."""
    pf = prod.function
    if reach != "neighbours" or not cons.function.grid:
        return "a gather reads entries anywhere: nothing to recompute around a point"
    if pf.kind != "map":
        return f"{pf.name} is a {pf.kind}: its result at a point needs every instance"
    if any(p.reach == "any" for p in pf.inputs):
        return f"{pf.name} gathers its input from anywhere"
    if pf.grid and pf.grid != cons.function.grid:
        return f"{pf.name} reads a {pf.grid}-D grid, {cons.function.name} a {cons.function.grid}-D one"
    if point_variant(pf) is None:
        return f"no variant of {pf.name} evaluates it at any point (4 entries a thread, mapping quad)"
    return None


def inputs_made_inside(prod: Call, fusion_outputs: set[int]) -> Value | None:
    """The first array or scalar input of ``prod`` made by a call of the kernel (ids of the values
    its calls make: ``fusion_outputs``), or None: a recomputed producer reads only global memory."""
    for a in prod.args:
        for v in ([a] if isinstance(a, Value) else a.values()):
            if v.id in fusion_outputs:
                return v
    return None


def recomputed(calls: Sequence[KernelCall]) -> dict[int, KernelCall]:
    """Value id -> the kernel call that makes it, for each value a stencil among
    ``calls`` (a kernel's calls) reads around its point and another of them makes: the values the
    kernel recomputes across the halo (legality allowed only these); {} at once for a kernel
    without a stencil."""
    if not any(kc.call.function.grid for kc in calls):
        return {}
    made = {v.id: kc for kc in calls for v in kc.call.outputs}
    out: dict[int, KernelCall] = {}
    for kc in calls:
        fn = kc.call.function
        if not fn.grid:
            continue
        for p, a in zip(fn.inputs, kc.call.args):
            if p.reach == "neighbours" and isinstance(a, Value) and a.id in made:
                out[a.id] = made[a.id]
    return out


def neighbourhood(fn: Function) -> int:
    """Points a stencil reads around each of its points, per grid input: its box ((2r+1)^rank) when
    its reference sums the box, else its star (2 rank r + 1).  1 for a function that is no stencil
    (a map reads each input at its point)."""
    if not fn.grid:
        return 1
    if fn.reference and "box(" in fn.reference:
        return (2 * fn.radius + 1) ** fn.grid
    return 2 * fn.grid * fn.radius + 1


def reads_per_point(fn: Function) -> int:
    """Entries of its array inputs a map reads to make one point (a stencil's neighbourhood per
    grid input, one per other input)."""
    return sum(neighbourhood(fn) if p.reach == "neighbours" else 1 for p in fn.inputs if p.type != "scalar")
