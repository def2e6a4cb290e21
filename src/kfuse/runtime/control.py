"""The small kernels around a program's launches: scalar arithmetic on device scalars, and the
control of device loops.

Scalar expressions are small trees of tuples, built by the front ends (``frontend/lower.py``'s
returned arithmetic, ``loops.py``'s traced predicates):

    ("leaf", k)            the k-th pointer argument (a 0-d device array), read by address
    ("const", k)           the k-th entry of the numbers array ``cst`` (constants of the user's,
                           written before each run: a new tolerance needs no new graph)
    ("num", x)             a number written into the code
    ("+" | "-" | "*" | "/", a, b), ("neg", a), ("sqrt", a), ("abs", a)
    ("<" | "<=" | ">" | ">=" | "==" | "!=", a, b), ("and", a, b), ("or", a, b), ("not", a)

A module holds, for one element type, the kernels of one loop or one jitted function:

* ``kf_scalars``: writes each expression of a list to its own output (one thread);
* ``kf_loop_first``: before a while loop, clears the count and sets the loop's conditional
  handle (``set``) to ``0 < max && pred``;
* ``kf_loop_next``: after a step, counts it, stores ``count < max && pred`` in a flag and sets a
  conditional handle to it (``set``) -- the handle of the IF node that runs the second step of a
  loop body, or none;
* ``kf_loop_again``: sets the WHILE handle from the flag (the body's last node);
* ``kf_loop_index``: adds one to a fori loop's counter (the ``i`` a body reads);
* ``kf_loop_clear``: sets ``clears`` ranges to their identities: the reduced outputs of the next
  step, cleared at the end of a step in one launch instead of the program's fills.

The loop kernels call ``cudaGraphSetConditional``, which lives in the device runtime library:
the module is compiled relocatable and linked with it (``-rdc=true``; CuPy links
``libcudadevrt``)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import CompileError

_BINARY = {"+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!="}
_LOGIC = {"and": "&&", "or": "||"}


def c_expr(e: tuple) -> str:
    """The C text of an expression tree over ``p{k}`` (pointers), ``cst[k]`` (numbers passed per
    launch) and ``("num", x)`` literals.  Built with an explicit stack: a long chain of operations
    is no recursion."""
    out: dict[int, str] = {}
    stack: list[tuple[tuple, bool]] = [(e, False)]
    while stack:
        node, ready = stack.pop()
        op = node[0]
        if op == "leaf":
            out[id(node)] = f"(*p{int(node[1])})"
            continue
        if op == "const":
            out[id(node)] = f"cst[{int(node[1])}]"
            continue
        if op == "num":
            x = float(node[1])
            if not math.isfinite(x):
                raise CompileError(f"the number {x} is not finite")
            out[id(node)] = f"(real){x!r}"
            continue
        args = node[1:]
        if not ready:
            stack.append((node, True))
            stack.extend((a, False) for a in args)
            continue
        a = [out[id(x)] for x in args]
        if op in _BINARY:
            out[id(node)] = f"({a[0]} {op} {a[1]})"
        elif op in _LOGIC:
            out[id(node)] = f"({a[0]} {_LOGIC[op]} {a[1]})"
        elif op == "not":
            out[id(node)] = f"(!{a[0]})"
        elif op == "neg":
            out[id(node)] = f"(-{a[0]})"
        elif op == "sqrt":
            out[id(node)] = f"sqrt({a[0]})"
        elif op == "abs":
            out[id(node)] = f"fabs({a[0]})"
        else:
            raise CompileError(f"unknown scalar operation {op!r}")
    return out[id(e)]


def counts(exprs) -> tuple[int, int]:
    """(pointers, numbers) the expressions read: one past the largest leaf and constant index."""
    p = c = 0
    stack = list(exprs)
    while stack:
        node = stack.pop()
        if node[0] == "leaf":
            p = max(p, int(node[1]) + 1)
        elif node[0] == "const":
            c = max(c, int(node[1]) + 1)
        elif node[0] != "num":
            stack.extend(node[1:])
    return p, c


def control_source(dtype: str, scalars=(), predicate: tuple | None = None, conditional: bool = True,
                   clears: int = 0) -> str:
    """The CUDA module for one element type: ``kf_scalars`` computing ``scalars`` (output k is
    ``o{k}``), and, with a ``predicate``, the loop kernels over it (see the module docstring).
    ``conditional=False``: the loop kernels set no graph handle (a loop checked from the host;
    the module then needs no device runtime)."""
    real = {"float32": "float", "float64": "double"}[np.dtype(dtype).name]

    def reads(exprs) -> str:
        n_ptr, n_num = counts(exprs)
        return (", const real* __restrict__ cst" if n_num else "") + "".join(
            f", const real* __restrict__ p{k}" for k in range(n_ptr))

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
        for k, e in enumerate(scalars):
            lines.append(f"    *o{k} = (real)({c_expr(e)});")
        lines += ["}", ""]
    if predicate is not None:
        pred, r = c_expr(predicate), reads([predicate])
        setc = "if (set) cudaGraphSetConditional(handle, go);" if conditional else "(void)handle; (void)set;"
        lines += [
            "// ctl: [steps taken, go on (1) or stop (0), the most steps, the predicate at the last check]",
            "// before the loop: no step taken; run the body while the predicate holds",
            f'extern "C" __global__ void kf_loop_first(unsigned long long handle, int set, int* ctl{r}) {{',
            f"    int holds = {pred};",
            "    int go = ctl[2] > 0 && holds;",
            "    ctl[0] = 0;",
            "    ctl[1] = go;",
            "    ctl[3] = holds;",
            f"    {setc}",
            "}",
            "",
            "// after a step: count it; go on while the count is below the most and the predicate holds",
            "// (once stopped, stopped: a loop checked from the host may run steps past its end)",
            f'extern "C" __global__ void kf_loop_next(unsigned long long handle, int set, int* ctl{r}) {{',
            "    int was = ctl[1];",
            "    if (!was) return;",
            f"    int holds = {pred};",
            "    int k = ctl[0] + 1;",
            "    int go = k < ctl[2] && holds;",
            "    ctl[0] = k;",
            "    ctl[1] = go;",
            "    ctl[3] = holds;",
            f"    {setc}",
            "}",
            "",
            "// the last node of a loop body: another round while the flag says so",
            'extern "C" __global__ void kf_loop_again(unsigned long long handle, const int* ctl) {',
            "    cudaGraphSetConditional(handle, ctl[1]);" if conditional else "    (void)handle; (void)ctl;",
            "}",
            "",
        ]
    if clears:
        params = ", ".join(f"real* __restrict__ q{k}, long long n{k}, real v{k}" for k in range(clears))
        lines.append("// the clears of the next step's reduced outputs, made at the end of a step (one launch)")
        lines.append(f'extern "C" __global__ void kf_loop_clear({params}) {{')
        lines.append("    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x, all = (long long)gridDim.x * blockDim.x;")
        for k in range(clears):
            lines.append(f"    for (long long e = t; e < n{k}; e += all) q{k}[e] = v{k};")
        lines += ["}", ""]
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
    ]
    return "\n".join(lines) + "\n"


def control_module(source: str, relocatable: bool):
    """The module of ``control_source``, compiled by NVRTC once per source and device;
    ``relocatable`` where its loop kernels set graph handles (linked with the device runtime)."""
    from .compiler import load_module
    return load_module(source, relocatable=relocatable)
