"""Halo views: a stencil reading a value made in its own kernel (``ir/halo.py``).

The stencil's routine is a template over its grid view G; where the value it reads around each
point is made by a call P of the same kernel, it gets a halo view instead of the value's
``KfGrid2``/``KfGrid3``: a struct of the same interface (``boundary``, the extents, ``n()``,
``inside``, ``get``, ``ld``, ``quad``) holding P's inputs (their global and grid views, its scalars)
whose reads evaluate P there.  ``at4(e, q)`` runs the routines of P's point variant (its loads and
computes, 8 x 1 threads of 4 entries: the thread ``(e mod KF_SUB) / 4`` of instance ``e / KF_SUB``)
into registers and gives the 4 entries e .. e+3 (e a multiple of 4); ``ld`` and ``quad`` take
their entries from the one or two such quads that hold them.  Entries past the grid's edges read
as 0 through ``get`` (the boundary rule), so P is evaluated only at points inside it.  P still
runs as a call of the kernel at its own points, where its result is stored or read on chip.
"""
from __future__ import annotations

from ..ir.halo import point_variant
from ..ir.kernel import KernelCall
from ..ir.program import Value
from .grids import EXTENTS, view_name


def struct_name(kernel: str, label: str) -> str:
    return f"kf_halo_{kernel}_{label}"


def member_params(kc: KernelCall) -> list:
    """P's input params its point variant reads, in P's order: the halo view's members after the
    extents."""
    v = point_variant(kc.call.function)
    assert v is not None, f"{kc.call.function.name}: no point variant (legality allows none)"
    used = {a.name for r in v.routines if r.kind != "store" for a in r.args}
    return [p for p in kc.call.function.inputs if p.name in used]


def _member(p, fn, label: str) -> tuple[str, str]:
    """(declaration, initialiser in the kernel) of the member holding input param p."""
    if p.type == "scalar":
        return f"real s_{p.name};", ""
    if fn.grid and p.reach == "neighbours":
        return (f"KfGrid{fn.grid}<KF_{fn.boundary.upper()}> in_{p.name};",
                view_name(label, fn.grid, fn.boundary))
    return f"KfVec in_{p.name};", f"g_{label}"


def struct_def(kernel: str, value: Value, rank: int, boundary: str, kc: KernelCall, reader: str) -> str:
    """The halo view of ``value`` (made by kernel call ``kc``) as the stencil ``reader`` (its call's
    text) reads it: a grid of ``rank`` with the boundary rule ``boundary``."""
    fn, var = kc.call.function, point_variant(kc.call.function)
    assert var is not None
    binds = kc.call.bindings()
    name = struct_name(kernel, value.label)
    ext = EXTENTS[:rank]
    xyz = ("x", "y", "z")[:rank]
    lines = [f"// {kc.call.text()} at any entry of its {rank}-D grid, where {reader} reads it: made in the",
             f"// same kernel, so evaluated there (halo recompute) instead of read from memory",
             f"struct {name} {{",
             f"    static constexpr int boundary = KF_{boundary.upper()};",
             f"    long long {', '.join(ext)};"]
    for p in member_params(kc):
        decl, _ = _member(p, fn, binds[p.name].label if p.type != "scalar" else "")
        lines.append(f"    {decl}   // {fn.name}'s {p.name}")
    lines.append(f"    KF_DEVICE long long n() const {{ return {' * '.join(ext)}; }}")
    lines.append("    // entry k (0 .. 3) of 4 registers, not indexed at run time (that would put them in local memory)")
    lines.append("    static KF_DEVICE real pick(const real (&q)[4], int k) { return k == 0 ? q[0] : k == 1 ? q[1] : "
                 "k == 2 ? q[2] : q[3]; }")
    lines.append(f"    KF_DEVICE bool inside({', '.join(f'long long {c}' for c in xyz)}) const {{")
    lines.append("        return " + " && ".join(f"{c} >= 0 && {c} < n{c}" for c in xyz) + ";")
    lines.append("    }")
    lines.append(f"    // entries e .. e+3 (e a multiple of 4): {fn.name}/{var.name}'s routines at the thread making them")
    lines.append("    KF_DEVICE void at4(long long e, real (&q)[4]) const {")
    lines.append("        const KfIx rix{(int)((e % KF_SUB) / 4), 0, e / KF_SUB, 0};")
    elements = list(dict.fromkeys(a.name for r in var.routines if r.kind != "store"
                                  for a in r.args if a.kind == "element"))
    lines.append("        KfReg<4> " + ", ".join(f"e_{e}" for e in elements) + ";")
    for r in var.routines:
        if r.kind == "store":
            continue
        args = ["rix"] + [f"e_{a.name}" if a.kind == "element" else
                          f"s_{a.name}" if a.kind == "scalar" else f"in_{a.name}" for a in r.args]
        lines.append(f"        {r.fn}({', '.join(args)});   // {r.name}")
    out = fn.outputs[0].name
    lines.append("#pragma unroll")
    lines.append(f"        for (int k = 0; k < 4; ++k) q[k] = e_{out}(k);")
    lines.append("    }")
    lines.append("    KF_DEVICE real ld(long long e) const {   // entry e (inside)")
    lines.append("        real q[4];")
    lines.append("        at4(e & ~3LL, q);")
    lines.append("        return pick(q, (int)(e & 3));")
    lines.append("    }")
    lines.append("    KF_DEVICE void quad(long long e, real (&v)[4]) const {   // entries e .. e+3 (inside)")
    lines.append("        const int r = (int)(e & 3);")
    lines.append("        if (r == 0) { at4(e, v); return; }")
    lines.append("        real a[4], b[4];")
    lines.append("        at4(e - r, a);")
    lines.append("        at4(e - r + 4, b);")
    lines.append("#pragma unroll")
    lines.append("        for (int k = 0; k < 4; ++k) v[k] = k + r < 4 ? pick(a, k + r) : pick(b, k + r - 4);")
    lines.append("    }")
    index = "x" if rank == 1 else "y * nx + x" if rank == 2 else "(z * ny + y) * nx + x"
    lines.append(f"    KF_DEVICE real get({', '.join(f'long long {c}' for c in xyz)}) const {{   "
                 f"// past the edges: {boundary}")
    lines.append(f"        return inside({', '.join(xyz)}) ? ld({index}) : real(0);")
    lines.append("    }")
    lines.append("};")
    return "\n".join(lines)


def initialisers(kc: KernelCall, scalar) -> tuple[list[str], list[str]]:
    """(declarations, member initialisers after the extents) of the halo view of ``kc``'s output
    in the kernel (``scalar(arg, prefix)``: emit's C text of a scalar argument)."""
    fn, binds = kc.call.function, kc.call.bindings()
    decls: list[str] = []
    inits: list[str] = []
    for p in member_params(kc):
        if p.type == "scalar":
            d, expr = scalar(binds[p.name], f"kf_h{p.name}_")
            decls += d
            inits.append(expr)
        else:
            inits.append(_member(p, fn, binds[p.name].label)[1])
    return decls, inits


def decl(kernel: str, value: Value, rank: int, var: str, inits: list[str]) -> str:
    """The halo view's declaration where the stencil's routine is called."""
    ext = ", ".join(f"{value.label}_{e}" for e in EXTENTS[:rank])
    return f"const {struct_name(kernel, value.label)} {var}{{{', '.join([ext] + inits)}}};"
