"""Wrapper kernels that call one library routine alone, as a generated kernel calls it, for the
barrier check (``barrier_check.py``): nothing in them synchronises, so a block-wide barrier in
their PTX is the routine's.

A wrapper passes the routine what a generated kernel passes (``emit.routine_call``): its macros as
template arguments (all but a cluster's), its index ``KfIx``, the global views of its ``&P``
arguments (``KfVec``, ``KfMat``, ``KfCsr``, a stencil's ``KfGrid2``/``KfGrid3`` of the function's
boundary rule), ``real`` scalars, and each element in registers (``KfReg<slots>``) or in shared
memory (the view struct of ``skeleton.view_struct`` for its mapping, shape and threads).  A routine
is a template over its element types, so two wrappers call it: one with each element in registers
where its mapping allows, one with each in shared memory where its mapping allows (one wrapper when
both are the same).  Every value comes from the kernel's arguments, its thread and block indices
or dynamic shared memory, and what the routine leaves in registers is summed into the output: no
branch of the routine folds away as it could on constants or unread results.
"""
from __future__ import annotations

from ..library.mappings import MAPPINGS
from ..library.schema import Function, Library, Routine, Variant
from . import skeleton as sk

PARAMS = ("real* __restrict__ kf_p", "real* __restrict__ kf_out", "const void* kf_ptr", "const void* kf_idx",
          "long long kf_n", "int kf_k")


def _value(x: str | int, macros: dict[str, int]) -> int:
    return x if isinstance(x, int) else macros[x]


def _global(fn: Function, name: str, var: str) -> str:
    """The declaration of a global view ``var`` of parameter ``name``."""
    p = fn.param_map[name]
    if fn.grid and p.reach == "neighbours":
        return (f"const KfGrid{fn.grid}<KF_{fn.boundary.upper()}> {var}{{kf_p, "
                + ", ".join(["kf_n"] * fn.grid) + "};")
    if p.type == "matrix":
        return f"const KfMat {var}{{kf_p, kf_n, kf_n}};"
    if p.type == "csr":
        return f"const KfCsr {var}{{kf_ptr, kf_idx, kf_p, kf_n, kf_n, kf_n, kf_k, kf_k, kf_n, kf_p}};"
    return f"const KfVec {var}{{kf_p, kf_n}};"


def wrappers(lib: Library, fn: Function, var: Variant, r: Routine,
             macros: tuple[tuple[str, int], ...]) -> tuple[list[str], list[str]] | None:
    """(the wrapper kernels of routine ``r`` of ``var`` with these macro values, named ``@KF@0``
    and ``@KF@1``; the view structs they use), or None where a mapping does not fit its element
    with these macros (no kernel holds the routine so)."""
    m = dict(macros)
    X, Y = (_value(t, m) for t in r.threads)
    tile = var.tile_shape(m, lib.tile) if fn.nesting == 2 or var.whole else None
    cluster = m[var.cluster] if var.cluster else 1
    locals_ = {loc.name: loc for loc in var.locals}
    elements = []
    for a in r.args:
        if a.kind != "element":
            continue
        if a.name in fn.param_map:
            p = fn.param_map[a.name]
            kind, shape, pad = p.element, lib.element_shape(p.element, tile, p.index), p.pad
        else:
            loc = locals_[a.name]
            kind, shape, pad = loc.element, tuple(_value(x, m) for x in loc.shape), loc.pad
        assert a.mapping is not None            # the loader checked element arguments
        if MAPPINGS[a.mapping].check(shape, X, Y):
            return None
        elements.append((kind, shape, pad, a.mapping))
    kernels: list[str] = []
    views: dict[str, str] = {}
    for registers in (True, False):
        text = _kernel(fn, var, r, macros, (X, Y), elements, registers, cluster, views)
        if text not in kernels:
            kernels.append(text)
    return [k.replace("@KF@", f"@KF@{n}", 1) for n, k in enumerate(kernels)], list(views.values())


def _kernel(fn: Function, var: Variant, r: Routine, macros: tuple[tuple[str, int], ...], shape: tuple[int, int],
            elements: list, registers: bool, cluster: int, views: dict[str, str]) -> str:
    X, Y = shape
    lines = [f'extern "C" __global__ void @KF@({", ".join(PARAMS)})', "{",
             "    extern __shared__ real kf_smem[];",
             f"    const KfIx kf_ix{{(int)(threadIdx.x % {X}), (int)(threadIdx.x / {X}), (long long)blockIdx.x, "
             "(long long)blockIdx.y};"]
    args, folds, offset, it = ["kf_ix"], [], 0, iter(elements)
    for n, a in enumerate(r.args):
        v = f"kf_a{n}"
        if a.kind == "global":
            lines.append("    " + _global(fn, a.name, v))
        elif a.kind == "scalar":
            v = f"kf_p[{n}]"
        else:
            kind, eshape, pad, mapping = next(it)
            mp = MAPPINGS[mapping]
            if (registers and mp.registers and mapping != "any") or not mp.shared:
                slots = mp.slots(eshape, X, Y)
                lines += [f"    KfReg<{slots}> {v};",
                          f"    for (int k = 0; k < {slots}; ++k) {v}.v[k] = kf_p[k + threadIdx.x];"]
                folds.append(f"    for (int k = 0; k < {slots}; ++k) kf_acc += {v}.v[k];")
            else:
                pitch = eshape[1] + pad if kind == "tile" else 0
                vname, vdef = sk.view_struct(kind, eshape, pitch, mapping, X, Y, cluster)
                views[vname] = vdef
                lines.append(f"    {vname} {v}{{kf_smem + {offset}, kf_ix.tx, kf_ix.ty}};")
                offset += (eshape[0] * pitch if kind == "tile" else eshape[0] if eshape else 1)
        args.append(v)
    values = dict(macros)
    template = tuple((k, values[k]) for k in var.template_macros)
    lines.append(sk.call_line("    ", r.fn, template, args))
    lines += ["    real kf_acc = 0;", *folds, "    kf_out[threadIdx.x] = kf_acc;", "}"]
    return "\n".join(lines)
