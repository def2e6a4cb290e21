"""Loops on the device: ``kfuse.fori_loop`` and ``kfuse.while_loop``, JAX's signatures, run many
steps of a traced body from one graph launch.

    def cg_body(s):
        A, b2, x, r, p, rr = s
        q = A @ p
        alpha = rr / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rr_new = r @ r
        return A, b2, x, r, r + (rr_new / rr) * p, rr_new

    s = kfuse.while_loop(lambda s: s[5] > tol * tol * s[1], cg_body, (A, b @ b, x, r, r, rr),
                         max_iterations=1000)
    x, steps = s[2], s.iterations

* The state is an array, a 0-d device array, a number, or a tuple, list or named tuple of them.
  Arrays and device scalars come in as CuPy arrays or torch CUDA tensors; the results are of the
  same kind, new arrays (the initial state is never written).
* The body is traced once per state signature and compiled like a ``@kfuse.jit`` function (a
  jitted body keeps its library and options).  ``fori_loop``'s body takes ``(i, state)``; ``i``
  is a device scalar of the element type, counted on the device.
* A state entry the body returns unchanged (the matrix) is read in place; a CSR matrix
  (cupyx, torch sparse CSR, kfuse.CSR) may be one, returned unchanged in its place: its three
  arrays' pointers are fixed for the loop and its structure is checked once, when it is bound.  The others live in
  two buffer sets that the steps alternate between (``runtime/loopgraph.py``), so a step writes
  its results where the step after it reads them, with no copy and no allocation.
* ``fori_loop`` launches graphs of many steps and returns at once (nothing waits for the GPU).
* ``while_loop``'s ``cond`` is traced too, over the state's device scalars: comparisons,
  ``+ - * /``, ``abs``, ``kfuse.sqrt``, ``&``, ``|``, ``~`` and numbers (the numbers are passed
  at each run: a new tolerance is no new graph).  It is evaluated on the device after every step
  into a go flag that every launch of the later steps reads: once it is 0 they do nothing, so the
  loop ends exactly at the step that made the condition false.  Steps are launched in graphs of
  ``runtime.loop.WHILE_CHUNK`` while a copy of the flag says go on (the host looks at the copy
  made one chunk earlier, so the GPU never waits for it), or, with ``KFUSE_LOOP_WHILE=graph``,
  as the body of one conditional WHILE graph node (CUDA 12.4 and later).  The host waits once,
  at the end, for the step count.  ``max_iterations`` bounds the loop: one that reaches it warns
  (``LoopWarning``) and its result says so (``LoopState.converged``).

Graphs are made once per state signature, stream and invariant arrays, and replayed: a second
solve with another right-hand side and tolerance captures nothing.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Any

import numpy as np

from .decorator import JitFunction, code_key, csr_spec, is_sparse, array_facts, lower_and_compile
from ..errors import KfuseError, TraceError
from ..frontend.trace import RANK_WORDS, ArgSpec, Proxy, Site, definition_site, trace, user_site
from ..library.loader import shipped_library
from .loopsteps import check_unroll, unrolled
from ..codegen.loop import WRITER, expression
from ..ir.loop import LoopArtifact

INSTANCES = 4             # buffer sets and graphs kept per loop body (least recently used dropped)


class LoopWarning(UserWarning):
    """A while loop stopped at ``max_iterations`` with its condition still true."""


class LoopState(tuple):
    """The final state of ``while_loop`` given as a tuple: that tuple, with ``iterations`` (steps
    taken) and ``converged`` (the condition turned false within ``max_iterations``)."""
    iterations: int
    converged: bool


# -- the user's state: leaves and structure ---------------------------------------------------------
def _flatten(state) -> tuple[list, Any]:
    if isinstance(state, (tuple, list)):
        return list(state), type(state)
    return [state], None


def _rebuild(kind, leaves: list):
    if kind is None:
        return leaves[0]
    if kind is tuple or kind is list:
        return kind(leaves)
    return kind(*leaves)          # a named tuple


def _site(fn) -> Site:
    """Where errors about ``fn`` as a whole point: its definition (the user's body where ``fn``
    composes it: ``loopsteps.unrolled``), or the caller's line."""
    fn = _shown(fn)
    return definition_site(fn) if hasattr(fn, "__code__") else user_site()


def _shown(fn):
    """The function a traced body names: the one ``fn`` wraps where that is a Python function."""
    inner = getattr(fn, "__wrapped__", None)
    return inner if hasattr(inner, "__code__") else fn


_SPECS: dict = {}       # state_specs' answers by the entries' types, shapes and dtypes (dense arrays and numbers)


def _entry_key(x):
    """What ``state_specs`` reads of a state entry that is a number or a dense CuPy, NumPy or torch
    array (its type, shape, dtype and layout), or None for anything else (checked every time)."""
    t = type(x)
    if t is int or t is float:
        return t
    if t.__name__ not in ("ndarray", "Tensor") or not t.__module__.startswith(("cupy", "numpy", "torch")):
        return None
    layout = getattr(x, "layout", None)
    if layout is not None and str(layout) != "torch.strided":
        return None
    return (t, tuple(x.shape), x.dtype)


def state_specs(leaves: list, what: str) -> tuple[list[ArgSpec], np.dtype]:
    """What tracing knows of each state entry, and the element type (errors at the user's line).
    A state of numbers and dense arrays seen before takes the answer then (a loop is called again
    and again with new arrays of the same shapes: the checks cost as much as several launches)."""
    keys = tuple(_entry_key(x) for x in leaves)
    key = (what, keys) if None not in keys else None
    got = _SPECS.get(key) if key is not None else None
    if got is None:
        got = _check_specs(leaves, what)
        if key is not None:
            if len(_SPECS) >= 256:
                _SPECS.clear()
            _SPECS[key] = got
    return list(got[0]), got[1]


def _check_specs(leaves: list, what: str) -> tuple[list[ArgSpec], np.dtype]:
    if not leaves:
        raise TraceError(f"{what}: the state is empty; a loop carries at least one array", user_site())
    specs, dtypes = [], {}
    for k, x in enumerate(leaves):
        name = f"state{k}"
        if isinstance(x, Proxy):
            raise TraceError(f"{what} runs from Python, not inside a @kfuse.jit function (call it on arrays)",
                             user_site())
        if isinstance(x, bool) or x is None or isinstance(x, (str, bytes)):
            raise TraceError(f"{what}: state entry {k} is a {type(x).__name__}; a loop carries arrays, 0-d "
                             "device arrays and numbers", user_site())
        if isinstance(x, (int, float, np.generic)):
            specs.append(ArgSpec(name, "dscalar"))
            continue
        if is_sparse(x):          # a CSR matrix: read in place (the body returns it unchanged)
            cshape, dtypes[k] = csr_spec(what, f"state entry {k}", x)
            specs.append(ArgSpec(name, "csr", cshape))
            continue
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            raise TraceError(f"{what}: state entry {k} is a {type(x).__name__}; a loop carries arrays, 0-d "
                             "device arrays and numbers", user_site())
        shape, dtypes[k] = array_facts(x, f"{what}: state entry {k}")
        specs.append(ArgSpec(name, "array" if shape else "dscalar", shape))
    if not any(s.kind in ("array", "csr") for s in specs):
        raise TraceError(f"{what}: the state holds no vector or matrix; nothing fixes the sizes or the device",
                         user_site())
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"entry {k} is {d}" for k, d in dtypes.items())
        raise TraceError(f"{what}: mixed dtypes in the state ({listed}); a loop runs in one element type",
                         user_site())
    return specs, next(iter(dtypes.values()))


def traced_shape(spec: ArgSpec) -> tuple:
    """The shape a state entry has in the traced program: a CSR matrix's (rows, columns), a 3-D
    entry's as the vector it is laid out as (a grid: frontend/trace.py ``_arg_node``)."""
    if spec.kind == "csr":
        return spec.shape[:2]
    return (spec.shape[0] * spec.shape[1] * spec.shape[2],) if len(spec.shape) == 3 else spec.shape


# -- the traced body ------------------------------------------------------------------------------------
class _Body:
    """A loop body traced and compiled for one state signature, and how each state entry of the
    next step is made from the program's outputs:

    ``sources[j]``: ("keep",) read in place | ("out", k) the program writes it |
    ("copy", src) copied from an entry of the step before or from output k (src ("leaf", j'),
    ("index",), ("out", k)) | ("tail", t) computed by the scalar kernel (expression ``tails[t]``)."""

    def __init__(self, fn, indexed: bool, kind, specs: list[ArgSpec], dtype: np.dtype, library, options,
                 what: str):
        n = len(specs)
        self.n, self.dtype, self.kind = n, dtype, kind
        offset = 1 if indexed else 0

        def step(*args):
            state = _rebuild(kind, list(args[offset:]))
            out = fn(args[0], state) if indexed else fn(state)
            leaves, got = _flatten(out)
            if (got is None) != (kind is None) or len(leaves) != n:
                have = "one value" if got is None else f"{len(leaves)} values"
                want = "one value" if kind is None else f"{n} values"
                raise TraceError(f"{what}: the body returns {have}; the state has {want} (a loop's state keeps "
                                 "its structure)", _site(fn))
            return tuple(leaves)
        step.__name__ = getattr(fn, "__name__", "body")
        all_specs = ([ArgSpec("i", "dscalar")] if indexed else []) + list(specs)
        tr = trace(step, all_specs, library, site_of=_shown(fn), args_in_place=True)
        for j, (res, spec) in enumerate(zip(tr.results, specs)):
            traced = traced_shape(spec)
            rank = 3 if spec.kind == "csr" else len(traced)
            if res.rank != rank or (rank and res.shape and any(a and a != b for a, b in zip(res.shape, traced))):
                got = f"a {RANK_WORDS[res.rank]}" + (f" of shape {res.shape}" if res.rank else "")
                raise TraceError(f"{what}: the body returns {got} as state entry {j}, which came in as a "
                                 f"{RANK_WORDS[rank]}" + (f" of shape {spec.shape}" if rank else "")
                                 + " (a loop's state keeps its shapes)", res.site)
        lowered, self.compiled = lower_and_compile(tr, step.__name__, dtype, library, options)
        self.lowered = lowered

        def arg(a: int) -> tuple:
            return ("index",) if indexed and a == 0 else ("leaf", a - offset)
        self.inputs = {name: arg(a) for name, a in lowered.inputs}      # program input -> where it is read
        self.out_leaf: dict[int, int] = {}       # output k -> the state entry it is written into
        self.sources: list[tuple] = []
        self.tails: list[tuple] = []             # expressions over ("leaf", m): where tail_reads[m] is
        self.tail_reads: list[tuple] = []
        for j, r in enumerate(lowered.returns):
            if r[0] == "arg":
                src = arg(r[1])
                if src != ("leaf", j) and (specs[j].kind == "csr" or (src[0] == "leaf" and specs[src[1]].kind == "csr")):
                    raise TraceError(f"{what}: the body returns a CSR matrix as state entry {j} in another "
                                     "place of the state; a CSR matrix in the state is returned unchanged, in "
                                     "its own place (it is read in place)", _site(fn))
                self.sources.append(("keep",) if src == ("leaf", j) else ("copy", src))
            elif r[0] == "out":
                if r[1] in self.out_leaf:
                    self.sources.append(("copy", ("out", r[1])))
                else:
                    self.out_leaf[r[1]] = j
                    self.sources.append(("out", r[1]))
            else:
                self.tails.append(expression(r[1], lowered.leaves, lambda place: ("out", place[1]) if place[0] == "out"
                                             else arg(place[1]), self.tail_reads))
                self.sources.append(("tail", len(self.tails) - 1))
        self.hidden = [k for k in range(len(lowered.outputs)) if k not in self.out_leaf]
        self.indexed = any(src == ("index",) for src in self.inputs.values()) or any(
            s == ("copy", ("index",)) for s in self.sources) or ("index",) in self.tail_reads
        self.instances: OrderedDict = OrderedDict()
        # what the runtime runs (runtime/loop.Instance): the program, the state's layout, the writer
        c = self.compiled
        self.artifact = LoopArtifact(c.program, c.dtype, c.calls.resolve_artifact, tuple(self.inputs.items()),
                                     tuple(lowered.outputs), tuple(self.sources), tuple(self.out_leaf.items()),
                                     tuple(self.hidden), tuple(self.tails), tuple(self.tail_reads), self.indexed, WRITER)


_BODIES: dict = {}


def traced_body(fn, indexed: bool, init, what: str) -> tuple[_Body, list]:
    """The traced body for this state (made once per signature) and the state's entries."""
    leaves, kind = _flatten(init)
    specs, dtype = state_specs(leaves, what)
    if isinstance(fn, JitFunction):
        library, options, fn = fn.library, fn._options, fn.fn
    else:
        if not callable(fn) or not hasattr(fn, "__code__"):
            raise TraceError(f"{what}: the body must be a Python function, got {type(fn).__name__}", user_site())
        # @kfuse.jit's defaults, and the shipped library loaded once (as a jitted function keeps the
        # library it loaded): loading reads and hashes every source file, about 1 ms, and a loop
        # written with a lambda body is a new function at every call
        library, options = shipped_library(), (True, True, True, False)
    key = (what, code_key(fn), library.digest, dtype.name, indexed, kind,
           tuple((s.kind, len(s.shape)) for s in specs), repr(options))
    body = _BODIES.get(key)
    if body is None:
        body = _BODIES[key] = _Body(fn, indexed, kind, specs, dtype, library, options, what)
    return body, leaves


# -- the traced condition -------------------------------------------------------------------------------
class _Cond:
    """A state entry, or arithmetic and comparisons of them, inside a while loop's ``cond``."""
    __slots__ = ("e", "rank", "logical")

    def __init__(self, e: tuple, rank: int = 0, logical: bool = False):
        self.e, self.rank, self.logical = e, rank, logical

    def _num(self, what: str) -> tuple:
        if self.rank:
            raise TraceError(f"{what} of a {RANK_WORDS[self.rank]} state entry in a while loop's cond: the "
                             "condition reads device scalars; compute the scalar it needs (a norm, a dot "
                             "product) in the body and carry it in the state", user_site())
        if self.logical:
            raise TraceError(f"{what} of a comparison in a while loop's cond: combine comparisons with "
                             "& | ~", user_site())
        return self.e

    def __add__(self, o):
        return _arith("+", self, o)

    def __radd__(self, o):
        return _arith("+", o, self)

    def __sub__(self, o):
        return _arith("-", self, o)

    def __rsub__(self, o):
        return _arith("-", o, self)

    def __mul__(self, o):
        return _arith("*", self, o)

    def __rmul__(self, o):
        return _arith("*", o, self)

    def __truediv__(self, o):
        return _arith("/", self, o)

    def __rtruediv__(self, o):
        return _arith("/", o, self)

    def __lt__(self, o):
        return _compare("<", self, o)

    def __le__(self, o):
        return _compare("<=", self, o)

    def __gt__(self, o):
        return _compare(">", self, o)

    def __ge__(self, o):
        return _compare(">=", self, o)

    def __eq__(self, o):
        return _compare("==", self, o)

    def __ne__(self, o):
        return _compare("!=", self, o)

    __hash__ = object.__hash__

    def __and__(self, o):
        return _logic("and", "&", self, o)

    def __or__(self, o):
        return _logic("or", "|", self, o)

    def __neg__(self):
        return _Cond(("neg", self._num("-")))

    def __abs__(self):
        return _Cond(("abs", self._num("abs()")))

    def __pow__(self, o):
        if o == 0.5:
            return _Cond(("sqrt", self._num("**")))
        if o == 2:
            e = self._num("**")
            return _Cond(("*", e, e))
        raise TraceError("** in a while loop's cond: only s ** 0.5 and s ** 2", user_site())

    def __invert__(self):
        if not self.logical:
            raise TraceError("~ in a while loop's cond negates a comparison", user_site())
        return _Cond(("not", self.e), logical=True)

    def __bool__(self):
        raise TraceError("a while loop's cond is traced once and evaluated on the device: Python's if, and, or "
                         "and not cannot read it; combine comparisons with & | ~", user_site())


def _operand(x, what: str) -> tuple:
    if isinstance(x, _Cond):
        return x._num(what)
    if isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool):
        _CONSTS.append(float(x))
        return ("const", len(_CONSTS) - 1)
    raise TraceError(f"{what}: a while loop's cond combines state scalars with numbers, not with a "
                     f"{type(x).__name__}", user_site())


_CONSTS: list[float] = []      # the numbers of the condition being traced (cst[k] in its kernels)


def _arith(op: str, a, b) -> _Cond:
    return _Cond((op, _operand(a, op), _operand(b, op)))


def _compare(op: str, a, b) -> _Cond:
    return _Cond((op, _operand(a, op), _operand(b, op)), logical=True)


def _logic(op: str, word: str, a: _Cond, b) -> _Cond:
    if not (isinstance(b, _Cond) and b.logical and a.logical):
        raise TraceError(f"{word} in a while loop's cond combines comparisons (write (a > b) {word} (c < d))",
                         user_site())
    return _Cond((op, a.e, b.e), logical=True)


def _predicate(cond, specs: list[ArgSpec], kind) -> tuple[tuple, list[float]]:
    """``cond`` traced over the state: its expression (leaves are state entries) and numbers."""
    if not callable(cond):
        raise TraceError(f"while_loop: cond must be a function of the state, got {type(cond).__name__}", user_site())
    _CONSTS.clear()
    values = [_Cond(("leaf", j), len(s.shape)) for j, s in enumerate(specs)]
    try:
        out = cond(_rebuild(kind, values))
    except KfuseError:
        raise
    except Exception as e:      # noqa: BLE001 - the user's own Python failed while tracing: say where
        raise TraceError(f"{type(e).__name__} while tracing the while loop's cond: {e}", _site(cond)) from None
    if isinstance(out, (bool, np.bool_)):
        raise TraceError("while_loop: cond returns a Python bool, which does not depend on the state on the "
                         "device; it must compare state scalars (e.g. s[3] > tol)", _site(cond))
    if not isinstance(out, _Cond):
        raise TraceError(f"while_loop: cond returns a {type(out).__name__}; it must compare state scalars "
                         "(e.g. s[3] > tol)", _site(cond))
    if not out.logical:
        raise TraceError("while_loop: cond returns a number, not a comparison (write s > 0, not s)", _site(cond))
    return out.e, list(_CONSTS)


# -- running ------------------------------------------------------------------------------------------
COUNTER_MAX = 2 ** 53     # fori_loop's bounds: the counter is exact in a double up to here
FLOAT32_COUNTER_MAX = 2 ** 24     # ... and in a float32 loop's counter (the state's dtype) up to here


def fori_loop(lower: int, upper: int, body_fun, init_val, unroll: int = 1):
    """Run ``state = body_fun(i, state)`` for ``i`` from ``lower`` to ``upper - 1`` on the GPU, as
    graphs of many steps; returns the final state (nothing waits for the GPU).  ``unroll``: steps
    traced as one program, so that the planner may fuse one step's tail with the next one's head
    (``loopsteps.py``; ``kfuse.explain_loop`` shows whether it does); the steps left over run one
    at a time."""
    for name, v in (("lower", lower), ("upper", upper)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TraceError(f"fori_loop: {name} must be an int, got {type(v).__name__}", user_site())
        if abs(int(v)) > COUNTER_MAX:       # the counter travels as a double; step counts as int64
            digits = str(int(v))
            raise TraceError(f"fori_loop: {name} = {digits[:24]}{'...' if len(digits) > 24 else ''} is out of "
                             "range (at most 2^53 in magnitude, where the loop's counter stays exact)", user_site())
        if abs(int(v)) > FLOAT32_COUNTER_MAX and state_specs(_flatten(init_val)[0], "fori_loop")[1] == np.float32:
            raise TraceError(f"fori_loop: {name} = {int(v)} is out of range for a float32 loop (at most 2^24 in "
                             "magnitude, where its float32 counter stays exact; a float64 one counts to 2^53)",
                             user_site())
    unroll = check_unroll(unroll)
    if unroll > 1 and int(upper) - int(lower) >= unroll:
        whole = (int(upper) - int(lower)) // unroll
        init_val = fori_loop(0, whole, unrolled(body_fun, unroll, int(lower)), init_val)
        lower = int(lower) + whole * unroll
        if lower == int(upper):
            return init_val
    body, leaves = traced_body(body_fun, True, init_val, "fori_loop")
    inst = _instance(body, leaves, None)
    steps = int(upper) - int(lower)
    inst.start(leaves, index=float(lower))
    if steps > 0:
        inst.run_counted(steps)
    return _rebuild(body.kind, inst.finish(steps % 2 if steps > 0 else 0, leaves))


def while_loop(cond_fun, body_fun, init_val, max_iterations: int | None = None):
    """Run ``state = body_fun(state)`` while ``cond_fun(state)`` holds (checked before every step,
    on the device), at most ``max_iterations`` steps (default: 2^31 - 1); returns the final
    state, a ``LoopState`` when it is a tuple (``iterations``, ``converged``).  The host waits
    once, at the end."""
    if max_iterations is None:
        max_iterations = 2**31 - 1
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, np.integer)) or not (
            0 <= max_iterations < 2**31):
        raise KfuseError(f"while_loop: max_iterations must be an int from 0 to 2^31 - 1, got {max_iterations!r}")
    body, leaves = traced_body(body_fun, False, init_val, "while_loop")
    specs, _ = state_specs(leaves, "while_loop")
    pred, consts = _predicate(cond_fun, specs, body.kind)
    inst = _instance(body, leaves, pred)
    inst.start(leaves, consts=consts, most=int(max_iterations))
    steps, converged = inst.run_while()
    if not converged:
        warnings.warn(f"while_loop stopped at max_iterations={max_iterations} with its condition still true",
                      LoopWarning, stacklevel=2)
    result = _rebuild(body.kind, inst.finish(inst.while_result(steps), leaves))
    if isinstance(result, tuple):
        result = LoopState(result)
        result.iterations, result.converged = steps, converged
    return result


def _instance(body: _Body, leaves: list, pred):
    from ..runtime.loop import Instance
    key = Instance.key(body.artifact, leaves, pred)
    inst = body.instances.get(key)
    if inst is None:
        inst = Instance(body.artifact, leaves, pred)
        body.instances[key] = inst
        if len(body.instances) > INSTANCES:
            body.instances.popitem(last=False)
    body.instances.move_to_end(key)
    return inst


__all__ = ["fori_loop", "while_loop", "LoopState", "LoopWarning"]
