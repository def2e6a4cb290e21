"""The CUDA module of a device loop's small kernels, and of returned scalar arithmetic: one
module per element type, written from the loop's counts and scalar expressions (``ir/loop.py``).

* ``kf_scalars``: writes each expression of a list to its own output (one thread; an operation
  the expressions share, the same tuple reached twice, is computed once);
* ``kf_loop_clear``: sets the next step's reduced outputs to their identities (instead of the
  program's fills: one launch at the end of a step);
* ``kf_loop_first``: before a while loop, clears the count and sets the go flags (and a
  conditional handle) to ``0 < most && pred``;
* ``kf_loop_next``: after each step of a while loop that still goes on, counts the step, saves
  the state it made, and sets the go flag to ``count < most && pred`` -- the steps launched
  after the one that stopped the loop run ahead on garbage, and the saved state is the result;
  it also makes the next step's clears;
* ``kf_loop_again``: sets a WHILE node's handle from the go flags;
* ``kf_loop_set``, ``kf_loop_index``: a fori loop's counter (the ``i`` a body reads);
* ``kf_loop_copy``: a state entry the body passes on from another;
* ``kf_loop_start``, ``kf_loop_copies``: a run's start and end, one launch each.

The loop kernels call ``cudaGraphSetConditional``, which lives in the device runtime library:
the runtime compiles the module relocatable and links it with that library (``-rdc=true``;
``runtime/control.control_module``), or asks for the plain variant (``conditional=False``)."""
from __future__ import annotations

import numpy as np

from ...ir.loop import by_value, counts
from .cexpr import c_shared


def control_source(dtype: str, scalars=(), predicate: tuple | None = None, conditional: bool = True,
                   clears: int = 0, saved: int = 0, carried: int = 0) -> str:
    """The CUDA module for one element type: ``kf_scalars`` computing ``scalars`` (output k is
    ``o{k}``); ``kf_loop_clear`` of ``clears`` ranges; and, with a ``predicate``, the while
    loop's kernels over it, ``kf_loop_next`` also clearing the ``clears`` ranges and saving
    ``saved`` state entries (see the module docstring).  ``conditional=False``: they set no graph
    handle (chunks launched from the host; the module then needs no device runtime).  With
    ``carried`` state entries, a run's start and end in one launch each: ``kf_loop_start`` (the
    initial state copied in, the counter, the while loop's control words and numbers, the first
    step's clears) and ``kf_loop_copies`` (the result copied out)."""
    real = {"float32": "float", "float64": "double"}[np.dtype(dtype).name]

    def reads(exprs) -> str:
        n_ptr, n_num = counts(exprs)
        values = by_value(exprs)
        return (", const real* __restrict__ cst" if n_num else "") + "".join(
            f", real v{k}" if k in values else f", const real* __restrict__ p{k}" for k in range(n_ptr))

    ranges = "".join(f", real* __restrict__ q{k}, long long n{k}, real v{k}" for k in range(clears))
    copies = "".join(f", real* __restrict__ d{k}, const real* __restrict__ s{k}, long long m{k}"
                     for k in range(saved))
    lines = [
        "// kfuse: scalar arithmetic on device scalars and the control of device loops",
        f"typedef {real} real;",
    ]
    if predicate is not None and conditional:
        lines.append('extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);')
    lines.append("")
    if scalars:
        outs = ", ".join(f"real* __restrict__ o{k}" for k in range(len(scalars)))
        lines.append(f'extern "C" __global__ void kf_scalars({outs}{reads(scalars)}) {{')
        decls, texts = c_shared(scalars)
        lines += [f"    {d}" for d in decls]
        for k, t in enumerate(texts):
            lines.append(f"    *o{k} = (real)({t});")
        lines += ["}", ""]
    if clears:
        lines.append("// the reduced outputs of the next step set to their identities (one launch for all)")
        lines.append(f'extern "C" __global__ void kf_loop_clear(int unused{ranges}) {{')
        lines.append("    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x, all = (long long)gridDim.x * blockDim.x;")
        lines += [f"    for (long long e = t; e < n{k}; e += all) q{k}[e] = v{k};" for k in range(clears)]
        lines += ["}", ""]
    if predicate is not None:
        # the predicate's shared operations computed once, before the line that reads it
        (pdecls, (pred,)), r = c_shared([predicate]), reads([predicate])
        setc = "if (set) cudaGraphSetConditional(handle, go);" if conditional else "(void)handle; (void)set;"
        lines += [
            "// ctl: [steps counted, go after an even step's check, go after an odd one's, the most steps,",
            "//       the predicate at the last check]",
            "// before the loop: nothing counted; go while the predicate holds",
            f'extern "C" __global__ void kf_loop_first(unsigned long long handle, int set, int* ctl{r}) {{',
            *[f"    {d}" for d in pdecls],
            f"    int holds = {pred};",
            "    int go = ctl[3] > 0 && holds;",
            "    ctl[0] = 0;",
            "    ctl[1] = go;",
            "    ctl[2] = go;",
            "    ctl[4] = holds;",
            f"    {setc}",
            "}",
            "",
            "// after step `odd` (0 or 1) of a pair, while the loop goes on: count it, save the state it made,",
            "// and go on while the count is below the most and the predicate holds.  Once stopped, later",
            "// steps (launched ahead) change nothing that counts.  All threads clear the next step's",
            "// reduced outputs; the flag read and the one written differ, so no block sees another's write.",
            f'extern "C" __global__ void kf_loop_next(unsigned long long handle, int set, int odd, int* ctl{r}'
            f'{ranges}{copies}) {{',
            "    const int was = ctl[1 + odd];",
            "    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x"
            + (", all = (long long)gridDim.x * blockDim.x;" if clears or saved else ";"),   # all: strides the loops
        ]
        lines += [f"    for (long long e = t; e < n{k}; e += all) q{k}[e] = v{k};" for k in range(clears)]
        if saved:
            lines.append("    if (was) {")
            lines += [f"        for (long long e = t; e < m{k}; e += all) d{k}[e] = s{k}[e];" for k in range(saved)]
            lines.append("    }")
        lines += [
            "    if (t == 0) {",
            "        int go = 0;",
            "        if (was) {",
            *[f"            {d}" for d in pdecls],
            f"            int holds = {pred};",
            "            int k = ctl[0] + 1;",
            "            ctl[0] = k;",
            "            ctl[4] = holds;",
            "            go = k < ctl[3] && holds;",
            "        }",
            "        ctl[2 - odd] = go;",
            f"        {setc}",
            "    }",
            "}",
            "",
            "// the WHILE node's handle: go on while both flags say so",
            'extern "C" __global__ void kf_loop_again(unsigned long long handle, const int* ctl) {',
            "    cudaGraphSetConditional(handle, ctl[1] && ctl[2]);" if conditional else "    (void)handle; (void)ctl;",
            "}",
            "",
        ]
    if carried:
        lines += start_source(carried, clears, counts((predicate,))[1] if predicate is not None else 0)
    lines += [
        "// a scalar set before a run (a fori loop's counter)",
        'extern "C" __global__ void kf_loop_set(real* o, real v) {',
        "    *o = v;",
        "}",
        "",
        "// a fori loop's counter, read by the body as a device scalar",
        'extern "C" __global__ void kf_loop_index(real* i) {',
        "    *i += (real)1;",
        "}",
        "",
        "// a state entry passed on from another (n entries)",
        'extern "C" __global__ void kf_loop_copy(real* __restrict__ dst, const real* __restrict__ src, long long n) {',
        "    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x)",
        "        dst[e] = src[e];",
        "}",
    ]
    return "\n".join(lines) + "\n"


def start_source(carried: int, clears: int, numbers: int) -> list[str]:
    """``kf_loop_start`` and ``kf_loop_copies`` (``control_source``): a run's start and end made by
    one launch each instead of a copy per state entry and a launch per small task; each copy a
    ``(destination, source, entries)`` argument triple, patched per call."""
    copies = "".join(f", real* __restrict__ a{k}, const real* __restrict__ b{k}, long long l{k}" for k in range(carried))
    ranges = "".join(f", real* __restrict__ q{k}, long long n{k}, real v{k}" for k in range(clears))
    nums = "".join(f", real c{k}" for k in range(numbers))
    grid = "    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x, all = (long long)gridDim.x * blockDim.x;"
    return [
        "// a run's start: the counter's first value (idx: null in a loop without one), a while loop's",
        "// control words (ctl: null in a fori loop) and numbers, the first step's reduced outputs",
        "// cleared, the initial state copied into buffer set 0",
        f'extern "C" __global__ void kf_loop_start(real* idx, real iv, int* ctl, int most, real* cst{nums}{ranges}{copies}) {{',
        grid,
        "    if (t == 0) {",
        "        if (idx) *idx = iv;",
        "        if (ctl) { ctl[0] = 0; ctl[1] = 1; ctl[2] = 1; ctl[3] = most; ctl[4] = 1; }",
        *[f"        cst[{k}] = c{k};" for k in range(numbers)],
        "    }",
        *[f"    for (long long e = t; e < n{k}; e += all) q{k}[e] = v{k};" for k in range(clears)],
        *[f"    for (long long e = t; e < l{k}; e += all) a{k}[e] = b{k}[e];" for k in range(carried)],
        "}",
        "",
        "// a run's end: the state entries copied into the result arrays",
        f'extern "C" __global__ void kf_loop_copies(int unused{copies}) {{',
        grid,
        *[f"    for (long long e = t; e < l{k}; e += all) a{k}[e] = b{k}[e];" for k in range(carried)],
        "}",
        "",
    ]


__all__ = ["control_source", "start_source"]
