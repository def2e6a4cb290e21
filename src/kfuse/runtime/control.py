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
* ``kf_loop_copy``: a state entry the body passes on from another.

The loop kernels call ``cudaGraphSetConditional``, which lives in the device runtime library:
the module is compiled relocatable and linked with it (``-rdc=true``; CuPy links
``libcudadevrt``)."""
from __future__ import annotations

import math
import sys

import numpy as np

from ..errors import CompileError
from .gpu import cupy

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


def expression(node, leaves: dict, where, reads: list) -> tuple:
    """A traced scalar result (``frontend/trace.Node``: lit, bin, neg, sqrt over leaves; read by
    its fields only) as an expression of this module.  ``leaves`` maps ``id(node)`` of a leaf to
    its place (``frontend/lower.Lowered.leaves``); ``where(place)`` says where the kernel reads it,
    and ``reads`` collects those, one pointer each, in the order of ``("leaf", k)``."""
    done: dict[int, tuple] = {}
    stack = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in leaves:
            src = where(leaves[id(n)])
            if src not in reads:
                reads.append(src)
            done[id(n)] = ("leaf", reads.index(src))
        elif n.kind == "lit":
            done[id(n)] = ("num", float(n.data))
        elif not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args)
        else:
            a = [done[id(x)] for x in n.args]
            done[id(n)] = (n.data, a[0], a[1]) if n.kind == "bin" else (n.kind, a[0])
    return done[id(node)]


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
                   clears: int = 0, saved: int = 0) -> str:
    """The CUDA module for one element type: ``kf_scalars`` computing ``scalars`` (output k is
    ``o{k}``); ``kf_loop_clear`` of ``clears`` ranges; and, with a ``predicate``, the while
    loop's kernels over it, ``kf_loop_next`` also clearing the ``clears`` ranges and saving
    ``saved`` state entries (see the module docstring).  ``conditional=False``: they set no graph
    handle (chunks launched from the host; the module then needs no device runtime)."""
    real = {"float32": "float", "float64": "double"}[np.dtype(dtype).name]

    def reads(exprs) -> str:
        n_ptr, n_num = counts(exprs)
        return (", const real* __restrict__ cst" if n_num else "") + "".join(
            f", const real* __restrict__ p{k}" for k in range(n_ptr))

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
        for k, e in enumerate(scalars):
            lines.append(f"    *o{k} = (real)({c_expr(e)});")
        lines += ["}", ""]
    if clears:
        lines.append("// the reduced outputs of the next step set to their identities (one launch for all)")
        lines.append(f'extern "C" __global__ void kf_loop_clear(int unused{ranges}) {{')
        lines.append("    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x, all = (long long)gridDim.x * blockDim.x;")
        lines += [f"    for (long long e = t; e < n{k}; e += all) q{k}[e] = v{k};" for k in range(clears)]
        lines += ["}", ""]
    if predicate is not None:
        pred, r = c_expr(predicate), reads([predicate])
        setc = "if (set) cudaGraphSetConditional(handle, go);" if conditional else "(void)handle; (void)set;"
        lines += [
            "// ctl: [steps counted, go after an even step's check, go after an odd one's, the most steps,",
            "//       the predicate at the last check]",
            "// before the loop: nothing counted; go while the predicate holds",
            f'extern "C" __global__ void kf_loop_first(unsigned long long handle, int set, int* ctl{r}) {{',
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
            "    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x, all = (long long)gridDim.x * blockDim.x;",
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


def control_module(source: str, relocatable: bool):
    """The module of ``control_source``, compiled by NVRTC once per source and device;
    ``relocatable`` where its loop kernels set graph handles (linked with the device runtime)."""
    from .compiler import load_module
    return load_module(source, relocatable=relocatable)


class ScalarTail:
    """Scalar arithmetic a jitted function returns (``rr_new / rr``, ``kfuse.sqrt(s)``), computed
    on the device by one kf_scalars launch on the caller's stream: no framework operation per
    arithmetic step.  ``leaves`` maps the expressions' leaves to ("out", k) or ("arg", i)."""

    def __init__(self, dtype: np.dtype, exprs: list, leaves: dict):
        self.dtype = np.dtype(dtype)
        self.reads: list = []
        self.exprs = [expression(e, leaves, lambda place: place, self.reads) for e in exprs]
        self.functions: dict = {}        # device -> kf_scalars

    def __call__(self, outs, args) -> list | None:
        """The results as 0-d arrays of ``outs[0]``'s framework, or None when a leaf is a host
        number."""
        from .args import facts, torch_tensor_type
        from .launch import KernelLaunch, PackedArgs
        sources = [outs[k] if where == "out" else args[k] for where, k in self.reads]
        like = outs[0]
        if any(not hasattr(x, "__cuda_array_interface__") for x in [like, *sources]):
            return None           # a host number (or host arrays standing in for the device's)
        tensor = torch_tensor_type()
        cp = cupy()
        kinds = (cp.ndarray,) if tensor is None else (cp.ndarray, tensor)
        if any(not isinstance(x, kinds) for x in sources):
            return None
        if tensor is not None and isinstance(like, tensor):
            torch = sys.modules["torch"]
            device = like.device.index
            results = [like.new_empty(()) for _ in self.exprs]
            stream = torch.cuda.current_stream(device).cuda_stream
        else:
            device = like.data.device_id
            with cp.cuda.Device(device):
                results = [cp.empty((), self.dtype) for _ in self.exprs]
            stream = cp.cuda.get_current_stream().ptr
        fn = self.functions.get(device)
        if fn is None:
            with cp.cuda.Device(device):
                module = control_module(control_source(self.dtype.name, self.exprs), relocatable=False)
                fn = self.functions[device] = module.get_function("kf_scalars")
        args_c = tuple(facts(x)[4] for x in results) + tuple(facts(x)[4] for x in sources)
        KernelLaunch(fn, 1, 1, PackedArgs(args_c), "kf_scalars").launch(stream)
        return results
