"""Synthesized elementary functions: an elementwise expression made a library function.

``x * y + 2.0 * exp(w)`` in a script, or ``np.exp(w)`` in a jitted function, has no library
function of its own; :func:`synthesize` makes one, at parse or trace time, with the metadata a
hand-written one has -- kind, parameters, variants and routines, flops, a NumPy reference -- so
that the fusion engine, the cost model, ``--explain`` and the tuning store treat it like any
other.  What it makes:

* a **map** over vectors (``kind = "map"``): inputs vectors and scalars, a vector out; variants
  ``warp``, ``quad`` and ``strip`` with the loads and stores of the shipped BLAS-1 maps
  (``blas1.cu``, ``blas1_rows.cu``), so it fuses wherever ``axpy`` does, a gemv's result on
  strips included (``sigmoid(A @ x)`` in the gemv's kernel);
* a **reduction** over vectors (``kind = "reduce"``): ``sum``, ``max``, ``min`` of an expression
  into a scalar (``mean``: the sum and the count of entries, two scalars the caller divides);
  variants as ``dot``'s.  Entries past the end load as 0, and ``exp(0)`` is not 0: the compute
  routine counts only entries below the length of one of its vectors, read from that vector's
  view (a parameter ``n0`` of reach ``any``, bound to the same value: its entries are never
  read, its length is; the builder binds a program input where it can, whose view is complete
  before any kernel, so that nothing is lost to the rule that such an input is);
* a **matrix map** (``kind = "map-map"``): inputs matrices, vectors broadcast along the rows
  (``d[:, None]``: entry i of row i) or the columns (``v[None, :]``), scalars; variants ``rows``
  and ``quad`` with ``ger``'s loads and stores (``blas2.cu``).

Only the arithmetic is new: it is written into a routine file of the function's own, named by
the digest of what defines it (``map_3f2a...cu``), kept in this process's registry
(``library/registry.py``) and read from there by code generation.  The same expression gives
the same function, name and file; the expression is in the program's text (its key and digest).
Numbers are part of the function (``2.0 * x``); scalars that vary (device scalars, dot results,
scalar arithmetic) are its scalar inputs.  Each routine is priced by the calibrated routine of
the shipped function whose loads and stores it shares (``Function.priced_as``).
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from ..errors import KfuseError
from . import ewexpr
from .registry import SOURCES

KINDS = ("scalar", "vector", "matrix", "row", "col")      # an input's kind
REDUCTIONS = ("sum", "max", "min", "mean", "count")    # count: the entries of its vector (a mean's divisor)
AXIS_SUMS = ("rowsum", "colsum")        # a matrix expression's sums along its rows (A.sum(axis=1)), columns
_PREFIX = {"scalar": "s", "vector": "x", "matrix": "A", "row": "u", "col": "v"}
_MADE: dict[str, object] = {}            # "reduction|kinds|carrier|the expression's text" -> Function
_SHIPPED_FILES = ("blas1.cu", "blas1_rows.cu", "blas2_strip.cu", "blas2.cu")


def names(kinds: tuple[str, ...]) -> list[str]:
    """The parameter names of inputs of these kinds: s0, x0, x1, A0, u0, v0 ... by kind."""
    count: dict[str, int] = {}
    out = []
    for k in kinds:
        n = count.get(k, 0)
        count[k] = n + 1
        out.append(f"{_PREFIX[k]}{n}")
    return out


def synthesize(expr: tuple, kinds: tuple[str, ...], reduce: str | None = None, carrier: int = 0):
    """The function computing ``expr`` over inputs of ``kinds`` (each read by the expression),
    elementwise, or reduced by ``reduce`` (one of :data:`REDUCTIONS`); a reduction counts the
    entries below the length of input ``carrier`` (a vector), bound again to its last parameter."""
    carrier = carrier if reduce else 0
    pnames = names(kinds)
    # what defines the function, its expression's text canonical: its cache key and its name's digest
    body = f"{reduce or 'map'}|{'|'.join(kinds)}|{carrier}|{ewexpr.text(expr, lambda k: pnames[k])}"
    fn = _MADE.get(body)
    if fn is None:
        fn = _MADE[body] = _make(expr, kinds, reduce, carrier, body)
    return fn


def _make(expr: tuple, kinds: tuple[str, ...], reduce: str | None, carrier: int, body: str):
    from .loader import SHIPPED, load_file, shipped_library
    if any(k in ("matrix", "row", "col") for k in kinds):
        if reduce is not None and reduce not in AXIS_SUMS:
            raise KfuseError(f"{reduce} of a matrix expression: kfuse reduces vector expressions, and sums a "
                             "matrix expression along its rows or columns")
        if "matrix" not in kinds and not ("row" in kinds and "col" in kinds):
            which = "v[:, None]" if "row" in kinds else "v[None, :]"
            raise KfuseError(f"{which} alone has one size: a matrix expression needs a matrix, or both v[:, None] "
                             "and w[None, :] (an outer product), to size its rows and columns")
        if reduce in AXIS_SUMS and not _zero_at_zero(expr, kinds, "col" if reduce == "rowsum" else "row"):
            raise KfuseError("the row or column sums of an expression that is not 0 where the matrix is 0 "
                             "(tiles past the matrix's edge read 0): sum a product, a difference, abs ... of it")
        level = 2
    else:
        level = 1
    if not any(k != "scalar" for k in kinds):
        raise KfuseError("an elementwise function needs a vector or matrix input")
    pnames = names(kinds)
    name = f"{reduce or 'map'}_{hashlib.sha256(body.encode()).hexdigest()[:10]}"
    shipped = shipped_library()
    for f in _SHIPPED_FILES:
        SOURCES.setdefault(str(SHIPPED / f), shipped.sources[str(SHIPPED / f)])
    cu = _cuda(name, expr, kinds, pnames, reduce, level)
    toml = _toml(name, expr, kinds, pnames, reduce, level, carrier)
    SOURCES[str(SHIPPED / f"{name}.cu")] = cu.encode()
    files: dict[str, bytes | None] = {f: shipped.sources[str(SHIPPED / f)] for f in _SHIPPED_FILES}
    files[f"{name}.cu"] = cu.encode()
    (fn,) = load_file(SHIPPED / f"{name}.toml", toml.encode(), (shipped.subvector,), shipped.tile, files)
    return replace(fn, priced_as=_priced_as(fn, kinds, pnames, reduce, level), synthesized=True)


# -- metadata --------------------------------------------------------------------------------------
def _toml(name, expr, kinds, pnames, reduce, level, carrier=0) -> str:
    entry = {"scalar": ("scalar", "[]"), "vector": ("vector", '["i"]'), "matrix": ("matrix", '["i", "j"]'),
             "row": ("vector", '["i"]'), "col": ("vector", '["j"]')}
    params = [f'  {{ name = "{p}", type = "{entry[k][0]}", dir = "in", index = {entry[k][1]} }},'
              for p, k in zip(pnames, kinds)]
    shown = ewexpr.text(expr, lambda k: {"row": "{}[:, None]", "col": "{}[None, :]"}.get(kinds[k], "{}")
                        .format(pnames[k]))
    ref_name = {"scalar": "{}", "vector": "{}", "matrix": "{}", "row": "np.atleast_2d({}).T",
                "col": "np.atleast_2d({})"}
    ref = ewexpr.text(expr, lambda k: ref_name[kinds[k]].format(pnames[k]), np=True)
    first = next(p for p, k in zip(pnames, kinds) if k != "scalar")
    ops = max(ewexpr.flops(expr), 1)
    if reduce in AXIS_SUMS:
        axis = "i" if reduce == "rowsum" else "j"
        params.append(f'  {{ name = "out", type = "vector", dir = "out", index = ["{axis}"], reduce = "sum" }},')
        kind, math_, flops = "map-reduce", f"out = {reduce}({shown})", f"{ops + 1} * {_axis_vec(pnames, kinds, 'matrix')}"
        ref = f"np.sum({ref}, axis={1 if reduce == 'rowsum' else 0})"
    elif level == 2:
        params.append('  { name = "out", type = "matrix", dir = "out", index = ["i", "j"] },')
        kind, math_ = "map-map", f"out = {shown}"
        # a broadcast-only expression (u[:, None] * v[None, :]) still has a full matrix of entries
        ref = f"({ref}) + 0 * np.outer({_axis_vec(pnames, kinds, 'row')}, {_axis_vec(pnames, kinds, 'col')})" \
            if "matrix" not in kinds else ref
        flops = f"{ops} * out"
    elif reduce is None:
        params.append('  { name = "out", type = "vector", dir = "out", index = ["i"] },')
        kind, math_, flops = "map", f"out = {shown}", f"{ops} * out"
        ref = f"({ref}) * {first} ** 0" if _scalar_only(expr, kinds) else ref
    else:
        op = "sum" if reduce in ("mean", "count") else reduce
        params.append(f'  {{ name = "n0", type = "vector", dir = "in", index = [], reach = "any", '
                      f'size = ["{pnames[carrier]}.len"] }},')
        params.append(f'  {{ name = "out", type = "scalar", dir = "out", index = [], reduce = "{op}" }},')
        kind, flops = "reduce", f"{ops + 1} * {first}"
        full = f"({ref}) * {first} ** 0" if _scalar_only(expr, kinds) else ref
        ref = f"np.{op}({full})" if reduce != "count" else f"np.sum({first} ** 0)"
        math_ = f"out = {op}({shown})" if reduce != "count" else f"out = len({first})"
        if reduce == "mean":
            params.append('  { name = "count", type = "scalar", dir = "out", index = [], reduce = "sum" },')
            ref = f"({ref}, np.sum({first} ** 0))"
            math_ += f", count = len({first})"
    lines = ["[[function]]", f'name = "{name}"', f'kind = "{kind}"', f"math = {_q(math_)}",
             f'doc = "Synthesized from an elementwise expression."', f"reference = {_q(ref)}",
             f'flops = "{flops}"', "params = [", *params, "]", ""]
    for v in (_variants_1(name, pnames, kinds, reduce) if level == 1 else _variants_2(name, pnames, kinds, reduce)):
        lines += v
    return "\n".join(lines) + "\n"


def _scalar_only(expr, kinds) -> bool:
    return all(kinds[k] == "scalar" for k in ewexpr.inputs_read(expr))


def _axis_vec(pnames, kinds, kind) -> str:
    return next(p for p, k in zip(pnames, kinds) if k == kind)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


_V1 = {   # variant -> (sources, threads, other fields, load fn, store fn, mapping)
    "warp": (["blas1.cu"], "[32, 1]", ["instances_per_block = [1, 2, 4, 8, 16, 32]"], "blas1_load", "blas1_store",
             "lane"),
    "quad": (["blas1.cu"], "[8, 1]", ["instances_per_block = [4, 8, 16, 32, 64, 128]"], "quad_load", "quad_store",
             "quad"),
    "strip": (["blas2_strip.cu", "blas1_rows.cu"], '[32, "BY"]',
              ['tile = ["R", "NC"]', 'whole = ["j"]',
               'macros = { BY = [8, 16], R = [1, 2], NC = [1024, 2048, 4096, 8192, 16384] }'],
              "srowvec_load", "srowvec_store", "bcast"),
}


def _variants_1(name, pnames, kinds, reduce) -> list[list[str]]:
    out = []
    for vname, (srcs, threads, extra, load, store, m) in _V1.items():
        files = ", ".join(f'"{s}"' for s in srcs + [f"{name}.cu"])
        lines = ["[[function.variant]]", f'name = "{vname}"', f"source = [{files}]", f"threads = {threads}", *extra]
        tensors = [p for p, k in zip(pnames, kinds) if k != "scalar"]
        scalars = [p for p, k in zip(pnames, kinds) if k == "scalar"]
        routines = []
        for p in tensors:
            routines.append(f'{{ name = "load_{p}", fn = "{load}", args = ["&{p}", "{p}:w:{m}"] }}')
        ins = [f'"{p}:r:{m}"' for p in tensors]
        if reduce is None:
            outs = [f'"out:w:{m}"']
        else:
            outs = ['"&n0"', '"out:acc:thread"'] + (['"count:acc:thread"'] if reduce == "mean" else [])
        args = ", ".join(ins + outs + [f'"{s}"' for s in scalars])
        compute = f"{name}_{'rows' if vname == 'strip' else vname if reduce else 'slots'}"
        routines.append(f'{{ name = "compute", fn = "{compute}", args = [{args}] }}')
        if reduce is None:
            routines.append(f'{{ name = "store_out", fn = "{store}", args = ["out:r:{m}", "&out"] }}')
        else:
            for o in ["out"] + (["count"] if reduce == "mean" else []):
                routines.append(f'{{ name = "store_{o}", fn = "{name}_store_{vname}", '
                                f'args = ["{o}:r:thread", "&{o}"] }}')
        lines += ["routines = [", *(f"  {r}," for r in routines), "]", ""]
        out.append(lines)
    return out


_V2 = {   # variant -> (threads, BY values, tile load, row load, col load, store, mappings: tile, row, col)
    "rows": ('[32, "BY"]', "[2, 4, 8, 16]", "tile_load", "rowvec_load", "colvec_load", "tile_store",
             ("rows", "split", "lane")),
    "quad": ('[8, "BY"]', "[4, 8, 16, 32]", "qtile_load", "rowvec_load", "qcolvec_load", "qtile_store",
             ("qrows", "split", "quad")),
}


def _variants_2(name, pnames, kinds, reduce=None) -> list[list[str]]:
    out = []
    for vname, (threads, bys, tload, rload, cload, store, (mt, mr, mc)) in _V2.items():
        if reduce in AXIS_SUMS and vname != "quad":
            continue
        lines = ["[[function.variant]]", f'name = "{vname}"', f'source = ["blas2.cu", "{name}.cu"]',
                 f"threads = {threads}", f"macros = {{ BY = {bys} }}"]
        routines, ins = [], []
        for p, k in zip(pnames, kinds):
            if k == "scalar":
                continue
            fn, m = {"matrix": (tload, mt), "row": (rload, mr), "col": (cload, mc)}[k]
            routines.append(f'{{ name = "load_{p}", fn = "{fn}", args = ["&{p}", "{p}:w:{m}"] }}')
            ins.append(f'"{p}:r:{m}"')
        om = {"rowsum": "rowpart", "colsum": "qcolpart"}.get(reduce or "", mt)
        mode = "acc" if reduce else "w"
        args = ", ".join(ins + [f'"out:{mode}:{om}"'] + [f'"{p}"' for p, k in zip(pnames, kinds) if k == "scalar"])
        routines.append(f'{{ name = "compute", fn = "{name}_{vname}", args = [{args}] }}')
        store = {"rowsum": "qrowsum_store", "colsum": "qcolsum_store"}.get(reduce or "", store)
        routines.append(f'{{ name = "store_out", fn = "{store}", args = ["out:r:{om}", "&out"] }}')
        lines += ["routines = [", *(f"  {r}," for r in routines), "]", ""]
        out.append(lines)
    return out


def _priced_as(fn, kinds, pnames, reduce, level) -> tuple[tuple[str, str], ...]:
    """Each routine's stand-in among the shipped functions' calibrated routines: a vector map's
    are vadd's, a reduction's dot's, a matrix map's ger's (its loads by what they move)."""
    out = []
    if level == 1:
        stand = "vadd(x,y)" if reduce is None else "dot(x,y)"
        for p, k in zip(pnames, kinds):
            if k != "scalar":
                out.append((f"load_{p}", f"{stand}/load_x"))
        out.append(("compute", f"{stand}/compute"))
        out += [(f"store_{o.name}", f"{stand}/store_out") for o in fn.outputs]
    elif reduce in AXIS_SUMS:
        stand = "gemv(A,x)" if reduce == "rowsum" else "gemtv(A,x)"
        for p, k in zip(pnames, kinds):
            if k != "scalar":
                out.append((f"load_{p}", f"{stand}/load_" + ("A" if k == "matrix" else "x")))
        out += [("compute", f"{stand}/compute"), ("store_out", f"{stand}/store_out")]
    else:
        for p, k in zip(pnames, kinds):
            if k != "scalar":
                out.append((f"load_{p}", "ger(A,u,v)/load_" + {"matrix": "A", "row": "u", "col": "v"}[k]))
        out += [("compute", "ger(A,u,v)/compute"), ("store_out", "ger(A,u,v)/store_out")]
    return tuple(out)


def _zero_at_zero(expr, kinds, padded: str) -> bool:
    """``expr`` is 0 where its matrices and its vectors along the summed axis (``padded``: col
    or row) are 0, whatever its scalars and other vectors (tried at two values each): a tile past
    the matrix's edge loads 0 there, and its entries must add nothing to the sums."""
    import numpy as np
    with np.errstate(all="ignore"):
        for s in (1.2345, -0.789):
            scope = {k: (0.0 if kind in ("matrix", padded) else s) for k, kind in enumerate(kinds)}
            if not _value(expr, scope) == 0.0:
                return False
    return True


def _value(e, scope):
    """``e`` evaluated on numbers (NumPy's semantics: ewexpr's NumPy text, run on scalars)."""
    import numpy as np
    text = ewexpr.text(e, lambda k: f"v{k}", np=True)
    from .expr import evaluate
    return evaluate(text, {f"v{k}": np.float64(v) for k, v in scope.items()}, "reference")


# -- routines ---------------------------------------------------------------------------------------
_COMBINE = {"sum": "{acc} += {v}", "mean": "{acc} += {v}", "count": "{acc} += real(1)", "max": "{acc} = kf_maximum({acc}, {v})",
            "min": "{acc} = kf_minimum({acc}, {v})"}


def _cuda(name, expr, kinds, pnames, reduce, level) -> str:
    shown = ewexpr.text(expr, lambda k: pnames[k])
    head = [f"// {name}: synthesized by kfuse from the elementwise expression", f"//   {shown}"
            + (f"  ({reduce} over its entries)" if reduce else ""), ""]
    tensors = [p for p, k in zip(pnames, kinds) if k != "scalar"]
    scalars = [p for p, k in zip(pnames, kinds) if k == "scalar"]
    classes = [f"class V{n}" for n in range(len(tensors))]
    params = [f"V{n}& {p}" for n, p in enumerate(tensors)]
    sargs = [f"real {s}" for s in scalars]
    if level == 2:
        return "\n".join(head + _cuda_2(name, expr, kinds, pnames, classes, params, sargs, reduce)) + "\n"
    if reduce is None:
        out_cls, out_par = ["class VO"], ["VO& out"]
    else:
        out_cls = ["class VO"] + (["class VC"] if reduce == "mean" else [])
        out_par = ["const KfVec& n0", "VO& out"] + (["VC& count"] if reduce == "mean" else [])
    tpl = ", ".join(classes + out_cls)
    sig = ", ".join(["const KfIx& ix"] + params + out_par + sargs)
    lines = list(head)
    val = ewexpr.c_text(expr, lambda k: pnames[k] if kinds[k] == "scalar" else f"{pnames[k]}(k)")
    # the forms: name, loop bound, leading template parameters, the entry of slot k (reductions)
    forms: list[tuple[str, str, str, str | None]] = [("slots", "V0::slots", "", None)] if reduce is None else [
        ("warp", "V0::slots", "", "ix.i * KF_SUB + ix.tx + 32 * k"),
        ("quad", "V0::slots", "", "ix.i * KF_SUB + 4 * ix.tx + k")]
    forms.append(("rows", "R", "int BY, int R, int NC, ", "ix.i * R + k"))
    for form, loop, lead, entry in forms:
        lines += [f"template <{lead}{tpl}>", f"KF_DEVICE void {name}_{form}({sig}) {{", "#pragma unroll",
                  f"    for (int k = 0; k < {loop}; ++k) {{"]
        if reduce is None:
            lines.append(f"        out(k) = {val};")
        else:
            lines.append(f"        if ({entry} < n0.n) {{      // an entry of the vectors, not past their end")
            lines.append(f"            {_COMBINE[reduce].format(acc='out(0)', v=val)};")
            if reduce == "mean":
                lines.append("            count(0) += real(1);")
            lines.append("        }")
        lines += ["    }", "}", ""]
    if reduce is not None:
        lines += _cuda_reduce_io(name, reduce)
    return "\n".join(lines) + "\n"


def _cuda_reduce_io(name, reduce) -> list[str]:
    """The stores that combine a thread's partial over the warp (or block) and into the scalar."""
    op = "sum" if reduce in ("mean", "count") else reduce
    warp = {"sum": "kf_warp_sum", "max": "kf_warp_max", "min": "kf_warp_min"}[op]
    put = {"sum": "g.add(0, {v})", "max": "kf_atomic_max(g.p, {v})", "min": "kf_atomic_min(g.p, {v})"}[op]
    return [
        "// one instance = one warp: lane 0 combines the warp's partials into the scalar",
        "template <class VR>",
        f"KF_DEVICE void {name}_store_warp(const KfIx& ix, VR& r, const KfVec& g) {{",
        f"    const real s = {warp}(r(0));",
        f"    if (ix.tx == 0) {put.format(v='s')};",
        "}",
        "",
        "// 4 instances a warp: every lane takes part, lane 0 of the warp combines",
        "template <class VR>",
        f"KF_DEVICE void {name}_store_quad(const KfIx& ix, VR& r, const KfVec& g) {{",
        f"    const real s = {warp}(r(0));",
        f"    if ((threadIdx.x & 31) == 0) {put.format(v='s')};",
        "}",
        "",
        "// on strips every thread holds the same partial: thread 0 combines it",
        "template <int BY, int R, int NC, class VR>",
        f"KF_DEVICE void {name}_store_strip(const KfIx& ix, VR& r, const KfVec& g) {{",
        f"    if (ix.tx == 0 && ix.ty == 0) {put.format(v='r(0)')};",
        "}",
    ]


def _cuda_2(name, expr, kinds, pnames, classes, params, sargs, reduce=None) -> list[str]:
    """A matrix map's compute for the ``rows`` mapping (slot k: row ty + BY k, column tx) and the
    ``quad`` one (slot 4 r + e: row ty + BY r, column 4 tx + e)."""
    tpl = ", ".join(["int BY"] + classes + ["class VO"])
    sig = ", ".join(["const KfIx& ix"] + params + ["VO& out"] + sargs)
    rows = {"matrix": "{}(k)", "row": "{}(k)", "col": "{}(0)", "scalar": "{}"}
    quad = {"matrix": "{}(4 * r + e)", "row": "{}(r)", "col": "{}(e)", "scalar": "{}"}
    v_rows = ewexpr.c_text(expr, lambda k: rows[kinds[k]].format(pnames[k]))
    v_quad = ewexpr.c_text(expr, lambda k: quad[kinds[k]].format(pnames[k]))
    if reduce == "rowsum":      # row partials of the thread's rows (mapping "rowpart": qrowsum_store sums them)
        return [f"template <{tpl}>", f"KF_DEVICE void {name}_quad({sig}) {{", "#pragma unroll",
                "    for (int r = 0; r < KF_TR / BY; ++r) {", "        real s = 0;", "#pragma unroll",
                f"        for (int e = 0; e < 4; ++e) s += {v_quad};", "        out(r) += s;", "    }", "}", ""]
    if reduce == "colsum":      # column partials of the thread's 4 columns ("qcolpart": qcolsum_store)
        return [f"template <{tpl}>", f"KF_DEVICE void {name}_quad({sig}) {{", "#pragma unroll",
                "    for (int e = 0; e < 4; ++e) {", "        real s = 0;", "#pragma unroll",
                f"        for (int r = 0; r < KF_TR / BY; ++r) s += {v_quad};", "        out(e) += s;", "    }", "}", ""]
    return [f"template <{tpl}>", f"KF_DEVICE void {name}_rows({sig}) {{", "#pragma unroll",
            "    for (int k = 0; k < KF_TR / BY; ++k)", f"        out(k) = {v_rows};", "}", "",
            f"template <{tpl}>", f"KF_DEVICE void {name}_quad({sig}) {{", "#pragma unroll",
            "    for (int r = 0; r < KF_TR / BY; ++r)", "#pragma unroll",
            "        for (int e = 0; e < 4; ++e)", f"            out(4 * r + e) = {v_quad};", "}", ""]
