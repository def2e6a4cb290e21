"""The small kernels around a program's launches: scalar arithmetic on device scalars, and the
control of device loops.

Scalar expressions are small trees of tuples, built by the front ends (``frontend/lower.py``'s
returned arithmetic, ``jit/loops.py``'s traced predicates):

    ("leaf", k)            the k-th pointer argument (a 0-d device array), read by address
    ("const", k)           the k-th entry of the numbers array ``cst`` (constants of the user's,
                           written before each run: a new tolerance needs no new graph)
    ("num", x)             a number written into the code
    ("value", k)           the k-th argument passed by value (a script's scalar input given as a
                           number: ``ScalarTail`` with ``numbers``); pointers and values share
                           the numbering
    ("+" | "-" | "*" | "/", a, b), ("neg", a), ("sqrt", a), ("abs", a)
    ("<" | "<=" | ">" | ">=" | "==" | "!=", a, b), ("and", a, b), ("or", a, b), ("not", a)

A module holds, for one element type, the kernels of one loop or one jitted function:

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
* ``kf_loop_copy``: a state entry the body passes on from another.

The loop kernels call ``cudaGraphSetConditional``, which lives in the device runtime library:
the module is compiled relocatable and linked with it (``-rdc=true``; CuPy links
``libcudadevrt``)."""
from __future__ import annotations

import math
import sys

import numpy as np

from ..errors import CompileError
from ..ir.dag import post_order
from .gpu import cupy

_BINARY = {"+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!="}
_LOGIC = {"and": "&&", "or": "||"}
_BOOL = {"<", "<=", ">", ">=", "==", "!=", "and", "or", "not"}     # operations of C type bool


def c_expr(e: tuple) -> str:
    """The C text of an expression over ``p{k}`` (pointers), ``cst[k]`` (numbers passed per
    launch) and ``("num", x)`` literals: one C expression, for callers that write it inside
    another.  An operation the expression reaches more than once (the same tuple: ``a * a``
    repeated) is computed once (``c_shared``), inside a lambda called in place,
    ``[&]() { const real t0 = ...; return ...; }()``: the text grows with the distinct operations,
    not with the paths to them (22 squarings written as a tree would be 84 MB of C).  Without
    shared operations it is the plain expression."""
    decls, (text,) = c_shared([e])
    if not decls:
        return text
    return f"[&]() {{ {' '.join(decls)} return {text}; }}()"


_LEAVES = ("leaf", "const", "num", "value")


def _c_leaf(node: tuple) -> str:
    op = node[0]
    if op == "leaf":
        return f"(*p{int(node[1])})"
    if op == "value":
        return f"v{int(node[1])}"
    if op == "const":
        return f"cst[{int(node[1])}]"
    x = float(node[1])
    if not math.isfinite(x):
        raise CompileError(f"the number {x} is not finite")
    return f"(real){x!r}"


def _c_op(op: str, a: list[str]) -> str:
    if op in _BINARY:
        return f"({a[0]} {op} {a[1]})"
    if op in _LOGIC:
        return f"({a[0]} {_LOGIC[op]} {a[1]})"
    if op == "not":
        return f"(!{a[0]})"
    if op == "neg":
        return f"(-{a[0]})"
    if op == "sqrt":
        return f"sqrt({a[0]})"
    if op == "abs":
        return f"fabs({a[0]})"
    raise CompileError(f"unknown scalar operation {op!r}")


def c_shared(exprs) -> tuple[list[str], list[str]]:
    """(declarations, one C text per expression) of expressions over ``p{k}``, ``v{k}``,
    ``cst[k]`` and literals: an operation reached more than once (the same tuple: ``expression``,
    ``script_expression`` and the loops' traced conditions keep the operands their sources share)
    is computed once, into ``const real t<n>``, declared before the texts.  Each distinct node is
    visited once, with an explicit stack: ``b = a * a; c = b * b; ...`` stays linear, where
    written out in full it would double with every step.  A shared comparison is a ``const bool``,
    arithmetic a ``const real`` (the types the operations have written in place)."""
    order = post_order(exprs, _operands)          # distinct nodes, operands first
    uses: dict[int, int] = {}
    for e in exprs:                     # a result is a use too: one result the operand of another
        uses[id(e)] = uses.get(id(e), 0) + 1
    for node in order:
        if node[0] not in _LEAVES:
            for a in node[1:]:
                uses[id(a)] = uses.get(id(a), 0) + 1
    decls: list[str] = []
    text: dict[int, str] = {}
    for node in order:
        if node[0] in _LEAVES:
            text[id(node)] = _c_leaf(node)
            continue
        t = _c_op(node[0], [text[id(a)] for a in node[1:]])
        if uses.get(id(node), 0) > 1:     # a comparison stays a bool, as it is written in place
            decls.append(f"const {'bool' if node[0] in _BOOL else 'real'} t{len(decls)} = {t};")
            t = f"t{len(decls) - 1}"
        text[id(node)] = t
    return decls, [text[id(e)] for e in exprs]


def expression(node, leaves: dict, where, reads: list) -> tuple:
    """A traced scalar result (``frontend/trace.Node``: lit, bin, neg, sqrt over leaves; read by
    its fields only) as an expression of this module.  ``leaves`` maps ``id(node)`` of a leaf to
    its place (``frontend/lower.Lowered.leaves``); ``where(place)`` says where the kernel reads it,
    and ``reads`` collects those, one pointer each, in the order of ``("leaf", k)``."""
    done: dict[int, tuple] = {}         # id(node) -> its expression: each distinct node made once
    stack = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in done:               # reached again (a = a * a reads a twice): the same tuple
            continue
        if id(n) in leaves:
            src = where(leaves[id(n)])
            if src not in reads:
                reads.append(src)
            done[id(n)] = ("leaf", reads.index(src))
        elif n.kind == "lit":
            done[id(n)] = ("num", float(n.data))
        elif not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if id(a) not in done)
        else:
            a = [done[id(x)] for x in n.args]
            done[id(n)] = (n.data, a[0], a[1]) if n.kind == "bin" else (n.kind, a[0])
    return done[id(node)]


def script_expression(arg, where, reads: list, done: dict | None = None) -> tuple:
    """A script's scalar arithmetic (``ir.program.ScalarArg``: values, literals, ``+ - * /``,
    ``neg``, ``sqrt``) as an expression of this module; ``where(value)`` says where the kernel
    reads a value, and ``reads`` collects those, one argument each, in the order of
    ``("leaf", k)``.  Operands the arithmetic shares stay shared (``c_shared``), across the
    expressions made with one ``done`` (id of a ScalarArg node -> its expression)."""
    done = {} if done is None else done
    for n in arg.nodes():
        if id(n) in done:
            continue
        if n.op is None:
            if n.value is None:
                done[id(n)] = ("num", float(n.literal))
                continue
            src = where(n.value)
            if src not in reads:
                reads.append(src)
            leaf = ("leaf", reads.index(src))
            done[id(n)] = ("neg", leaf) if n.negate else leaf
        else:
            done[id(n)] = (n.op, *(done[id(o)] for o in n.operands))
    return done[id(arg)]


def _operands(node: tuple) -> tuple:
    return () if node[0] in _LEAVES else node[1:]


def _values(exprs) -> set[int]:
    """The argument indices the expressions read by value."""
    return {int(node[1]) for node in post_order(exprs, _operands) if node[0] == "value"}


def _by_value(exprs: list, numbers: tuple[bool, ...]) -> list:
    """The expressions with the leaves ``k`` where ``numbers[k]`` read by value (operands shared,
    within one expression or between them, kept shared)."""
    done: dict[int, tuple] = {}
    for node in post_order(exprs, _operands):
        if node[0] in _LEAVES:
            done[id(node)] = ("value", node[1]) if node[0] == "leaf" and numbers[int(node[1])] else node
        else:
            done[id(node)] = (node[0], *(done[id(a)] for a in node[1:]))
    return [done[id(e)] for e in exprs]


def counts(exprs) -> tuple[int, int]:
    """(arguments, numbers) the expressions read: one past the largest leaf (or value) and
    constant index."""
    p = c = 0
    for node in post_order(exprs, _operands):
        if node[0] in ("leaf", "value"):
            p = max(p, int(node[1]) + 1)
        elif node[0] == "const":
            c = max(c, int(node[1]) + 1)
    return p, c


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
        by_value = _values(exprs)
        return (", const real* __restrict__ cst" if n_num else "") + "".join(
            f", real v{k}" if k in by_value else f", const real* __restrict__ p{k}" for k in range(n_ptr))

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


def control_module(source: str, relocatable: bool):
    """The module of ``control_source``, compiled by NVRTC once per source and device;
    ``relocatable`` where its loop kernels set graph handles (linked with the device runtime)."""
    from .compiler import load_module
    return load_module(source, relocatable=relocatable)


class ScalarTail:
    """Scalar arithmetic returned as results -- a jitted function's (``rr_new / rr``,
    ``kfuse.sqrt(s)``) or a script's (``return sqrt(rr), rr / bb;``) -- computed on the device by
    one kf_scalars launch on the caller's stream: no framework operation per arithmetic step.
    ``exprs`` are expressions of this module over ``("leaf", k)``, ``reads[k]`` the place of
    leaf k (the front end's: ``("out", k)``, ``("arg", i)``, ``("in", name)``).  With
    ``numbers``, a leaf given as a host number (a script's scalar input passed as a Python
    number) is passed by value: the module is built once per device and set of such leaves."""

    def __init__(self, dtype, exprs: list, reads: list, numbers: bool = False):
        self.dtype = np.dtype(dtype)
        self.exprs, self.reads, self.numbers = list(exprs), list(reads), numbers
        self.functions: dict = {}        # (device, leaves by value) -> kf_scalars

    @classmethod
    def traced(cls, dtype, nodes: list, leaves: dict) -> "ScalarTail":
        """The tail of a jitted function: ``nodes`` traced scalar results, ``leaves`` maps their
        leaves to ("out", k) or ("arg", i) (``frontend/lower.Lowered.leaves``)."""
        reads: list = []
        exprs = [expression(e, leaves, lambda place: place, reads) for e in nodes]
        return cls(dtype, exprs, reads)

    @classmethod
    def script(cls, program, dtype) -> "ScalarTail":
        """The tail of a script's returned arithmetic (``program.returned_arithmetic()``): leaves
        are the program's outputs, ("out", k), and its scalar inputs, ("in", name)."""
        out = {v.id: k for k, v in enumerate(program.outputs)}
        reads: list = []
        done: dict = {}         # operands shared between the returned expressions stay shared
        exprs = [script_expression(a, lambda v: ("out", out[v.id]) if v.id in out else ("in", v.name), reads, done)
                 for a in program.returned_arithmetic()]
        return cls(dtype, exprs, reads, numbers=True)

    def source(self, numbers: tuple[bool, ...] = ()) -> str:
        """The kf_scalars module, the leaves flagged in ``numbers`` read by value (none: every
        leaf by address)."""
        exprs = _by_value(self.exprs, numbers) if any(numbers) else self.exprs
        return control_source(self.dtype.name, exprs)

    def __call__(self, outs, args) -> list | None:
        """A jitted function's results as 0-d arrays of ``outs[0]``'s framework, or None when a
        leaf is a host number."""
        from .args import torch_tensor_type
        sources = [outs[k] if where == "out" else args[k] for where, k in self.reads]
        like = outs[0]
        if any(not hasattr(x, "__cuda_array_interface__") for x in [like, *sources]):
            return None           # a host number (or host arrays standing in for the device's)
        tensor = torch_tensor_type()
        kinds = (cupy().ndarray,) if tensor is None else (cupy().ndarray, tensor)
        if any(not isinstance(x, kinds) for x in sources):
            return None
        return self.run(like, sources)

    def empty(self, like) -> list:
        """Results for one run: 0-d arrays of ``like``'s framework, device and element type."""
        from .args import torch_tensor_type
        tensor = torch_tensor_type()
        if tensor is not None and isinstance(like, tensor):
            return [like.new_empty(()) for _ in self.exprs]
        cp = cupy()
        with cp.cuda.Device(like.data.device_id):
            return [cp.empty((), self.dtype) for _ in self.exprs]

    def run(self, like, sources: list, stream: int | None = None, results: list | None = None) -> list:
        """Launch kf_scalars over ``sources`` (aligned with ``reads``: 0-d device arrays, or host
        numbers where ``numbers``) on ``stream`` (default: the current stream of ``like``'s
        framework), writing ``results`` (default: new ones, ``empty``); returns them."""
        from .args import adapt, facts, torch_tensor_type
        from .launch import KernelLaunch, PackedArgs
        tensor = torch_tensor_type()
        cp = cupy()
        torch_like = tensor is not None and isinstance(like, tensor)
        device = like.device.index if torch_like else like.data.device_id
        if results is None:
            results = self.empty(like)
        if stream is None:
            stream = (sys.modules["torch"].cuda.current_stream(device).cuda_stream if torch_like
                      else cp.cuda.get_current_stream().ptr)
        numbers = tuple(self.numbers and not _on_device(x, cp, tensor) for x in sources)
        fn = self.functions.get((device, numbers))
        if fn is None:
            with cp.cuda.Device(device):
                module = control_module(self.source(numbers), relocatable=False)
                fn = self.functions[device, numbers] = module.get_function("kf_scalars")
        real = self.dtype.type
        args_c = tuple(facts(x)[4] for x in results) + tuple(
            real(float(x)) if number else facts(x if isinstance(x, cp.ndarray) or _is_tensor(x, tensor)
                                                else adapt(x, "a returned scalar's operand"))[4]
            for x, number in zip(sources, numbers))
        KernelLaunch(fn, 1, 1, PackedArgs(args_c), "kf_scalars").launch(stream)
        return results


def _is_tensor(x, tensor) -> bool:
    return tensor is not None and isinstance(x, tensor)


def _on_device(x, cp, tensor) -> bool:
    """A source on the device (read by address), not a host number (as the executor decides)."""
    if _is_tensor(x, tensor):
        return bool(x.is_cuda)
    return isinstance(x, cp.ndarray) or hasattr(x, "__cuda_array_interface__")
