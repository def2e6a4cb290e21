"""``@kfuse.jit``: a Python function over arrays, traced into a program and run like a script.

The first call with a new signature traces the function (``frontend/trace.py``), lowers the
traced graph onto library calls and builds the program IR from them (``frontend/calls.py``,
``frontend/lowered.py``: the script front end's builder, so the same program a script of those
calls parses to, with errors at the user's line) and plans it with ``kfuse.api.compile_program``
-- the same plan search and code generation as the script front end.  ``fn.script`` shows the
program as a script.  Later calls with that signature look the compiled program up in a dict
and go straight to its call path (``CompiledScript.__call__``: bindings per argument signature,
CUDA graph replay).

The signature (the dict key) is, per argument, its type, rank and dtype -- a Python number and
a 0-d device array differ, so a scalar an earlier call returned is passed by address.  A CSR
matrix argument (cupyx, torch sparse CSR, kfuse.CSR) is a ``csr`` input: its key is its type and
its values' dtype (and a torch tensor's layout); its sizes and index type are the binding's.  Shapes,
devices and size classes are the compiled program's business one level down: sizes are symbolic
in the program, its call path keeps a binding per shape and device, and it plans each size class
on first use (``CompiledScript.for_sizes``).  Entries are also kept under a full key -- the
function's code (its bytecode and constants, numbers it closes over), the library digest, the
element type, the options -- so that a changed function or library never finds a stale program.

Python numbers that the function takes from outside its arguments (globals, closures) are
constants of the compiled program, like a number written in the function; pass them as
arguments to vary them per call.

Traced by ``torch.compile``, a call is one node of the graph, the torch custom operator
``kfuse::call`` (``compiler/torchop.py``); in eager, a torch tensor that requires grad is refused
(kfuse computes no gradients: its results would leave the autograd graph silently).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import marshal
import math
import operator
import types
from typing import Any

import numpy as np

from ..compiler.api import check_flags, check_tuned, compile_program, library_folders
from ..compiler import torchop
from ..compiler.compiled import CompiledScript
from ..errors import KfuseError, ScriptError, TraceError
from ..frontend.calls import library_calls
from ..frontend.lowered import Lowered
from ..frontend.trace import ArgSpec, Proxy, Trace, trace, user_site
from ..library.loader import load_library
from ..library.schema import Library
from ..progress import PassTimes

_SHARED: dict = {}          # full key -> _Entry, across jitted functions (the same code and library)
_NUMBER = "number"


class _Entry:
    """One signature's compiled program and how its results map onto the function's."""
    __slots__ = ("compiled", "inputs", "lowered", "direct", "picks", "single", "dtype", "key", "tail", "form",
                 "shapes", "_executor")

    def __init__(self, compiled, lowered: Lowered, single: bool, dtype: np.dtype, key):
        self.compiled, self.lowered, self.single, self.dtype, self.key = compiled, lowered, single, dtype, key
        self.inputs = lowered.inputs
        outs = [("out", k) for k in range(len(lowered.outputs))]
        self.direct = lowered.returns == outs and (len(outs) == 1) == single
        # results that are outputs and arguments only (a loop's state passing its matrix on): picked
        # without the arithmetic's machinery, on every call of a fed-back loop
        self.picks = (None if any(r[0] not in ("out", "arg") for r in lowered.returns)
                      else tuple((r[0] == "out", r[1]) for r in lowered.returns))
        self.tail: Any = None   # the returned scalar arithmetic as one kernel (runtime/control.ScalarTail)
        self.form = torchop.form_of(lowered.returns, single)   # what kfuse::call returns (run_separately)
        self.shapes: dict = {}  # arguments' shapes -> results' shapes (run_separately, every call)
        self._executor: Any = None

    @property
    def executor(self):
        """The plain call's executor: the compiled program's, or, where the function returns
        scalar arithmetic over its outputs and the program's inputs, one of this entry's own
        that launches the arithmetic after the kernels (``binding.Returns``: in the same graph,
        its results in the call's block).  Its own: a compiled program is shared by every
        function that traces to it, whatever arithmetic each returns."""
        if self._executor is None:
            self._executor = self.compiled.calls.executor
            tail = self._tail()
            if tail is not None:
                names = {k: name for name, k in self.inputs}
                reads = tail.code.reads
                if all(where == "out" or k in names for where, k in reads):
                    from ..runtime.binding import Returns
                    from ..runtime.executor import Executor
                    calls = self.compiled.calls
                    ex = Executor(self.compiled.program, self.compiled.dtype, calls.resolve_artifact)
                    ex.returns = Returns(tail, tuple(
                        (where, k) if where == "out" else ("in", names[k]) for where, k in reads))
                    self._executor = ex
        return self._executor

    def _tail(self):
        """The returned scalar arithmetic as one kernel (``runtime/control.ScalarTail``), made once:
        the executor's binding launches it, as does ``_scalars``; None where there is none."""
        if self.tail is None:
            exprs = [r[1] for r in self.lowered.returns if r[0] == "expr"]
            if exprs:
                from ..codegen.loop.scalars import ScalarCode
                from ..runtime.control import ScalarTail
                self.tail = ScalarTail(ScalarCode.traced(self.dtype, exprs, self.lowered.leaves))
        return self.tail

    def package(self, res, args):
        outs = res if isinstance(res, tuple) else (res,)
        if self.picks is not None:
            items = [outs[k] if out else args[k] for out, k in self.picks]
            return items[0] if self.single else tuple(items)
        n = len(self.lowered.outputs)
        computed = list(outs[n:]) if len(outs) > n else self._scalars(outs, args)
        items = []
        for r in self.lowered.returns:
            if r[0] == "out":
                items.append(outs[r[1]])
            elif r[0] == "arg":
                items.append(args[r[1]])
            elif computed is not None:
                items.append(computed.pop(0))
            else:
                items.append(self._scalar(r[1], outs, args))
        return items[0] if self.single else tuple(items)

    def scalars(self, outs, args) -> list:
        """Every returned scalar arithmetic result, in the order of the return statement:
        on the device by one launch (``_scalars``), else with the caller's framework."""
        computed = self._scalars(outs, args)
        if computed is not None:
            return computed
        return [self._scalar(r[1], outs, args) for r in self.lowered.returns if r[0] == "expr"]

    def _scalars(self, outs, args) -> list | None:
        """Every scalar arithmetic result, computed on the device by one small kernel launch on
        the caller's stream; None where there is none, or one reads a number given as a Python
        scalar (the framework computes those)."""
        tail = self._tail()
        return None if tail is None else tail(outs, args)

    def _scalar(self, node, outs, args):
        """Scalar arithmetic returned as a result: evaluated with the caller's framework on the
        0-d results and arguments (on its current stream, no host round trip)."""
        leaves = self.lowered.leaves
        memo: dict[int, Any] = {}      # id(node) -> its value: an operand shared (a = a * a) is computed once

        def ev(n):
            if id(n) in memo:
                return memo[id(n)]
            if n.kind == "lit":
                v = n.data
            elif id(n) in leaves:
                where, k = leaves[id(n)]
                v = outs[k] if where == "out" else args[k]
            else:
                a = [ev(x) for x in n.args]
                if n.kind == "neg":
                    v = -a[0]
                elif n.kind == "sqrt":
                    v = a[0] ** 0.5
                else:
                    v = {"+": lambda: a[0] + a[1], "-": lambda: a[0] - a[1], "*": lambda: a[0] * a[1],
                         "/": lambda: a[0] / a[1]}[n.data]()
            memo[id(n)] = v
            return v
        value = ev(node)
        like = outs[0]
        if hasattr(like, "new_tensor"):         # torch
            return value.to(like.dtype) if hasattr(value, "to") else like.new_tensor(value, dtype=like.dtype)
        if hasattr(value, "astype"):            # a CuPy array (NumPy on the CPU)
            return value.astype(self.dtype, copy=False)
        import cupy                             # arithmetic of Python numbers only
        return cupy.asarray(value, dtype=self.dtype)


def _refuse_grad(function: str, name: str) -> None:
    """A torch tensor that requires grad, where grad mode is on: kfuse computes no gradients, and
    a result without a ``grad_fn`` would cut the graph silently."""
    import torch
    if torch.is_grad_enabled():
        raise KfuseError(f"{function}(): argument {name} requires grad, and kfuse computes no gradients (its results "
                         f"would have no grad_fn); call it under torch.no_grad(), or pass {name}.detach()")


def array_facts(a, label: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and element type of an array argument of a jitted function or a loop's state entry
    (``label`` names it), checked: a duck-typed array's shape and dtype must be an array's, each
    size within the scripts' bound and at least 1, and the entries too (a 3-D array is one vector
    of them), rank at most 3 (a 3-D array is a grid vector), float32 or float64.  A size must be an integer (not a
    float, which ``int`` would truncate, nor a bool) and the dtype given (``np.dtype(None)`` is
    float64).  Errors name the caller's line."""
    try:                # a duck-typed array: its shape and dtype may be anything
        shape = tuple(_size(n) for n in a.shape)
        dt = _dtype(a.dtype)
    except (TypeError, ValueError, OverflowError):
        raise TraceError(f"{label}: its shape {a.shape!r:.60} or dtype {a.dtype!r:.60} is not an array's "
                         "(integer sizes and a float dtype)", user_site()) from None
    if any(not 0 <= n <= 2 ** 48 for n in shape):     # the scripts' bound on a size
        raise TraceError(f"{label} has shape {str(shape):.80}: a size is from 0 to 2^48", user_site())
    if math.prod(shape) > 2 ** 48:          # a grid's length is the product of its axes
        raise TraceError(f"{label} has shape {str(shape):.80}: about 2^{math.prod(shape).bit_length() - 1} "
                         "entries, at most 2^48", user_site())
    if len(shape) > 3:
        raise TraceError(f"{label} has rank {len(shape)} (shape {shape}); kfuse works on scalars, vectors, "
                         "matrices and 3-D grids (vectors)", user_site())
    if 0 in shape:      # else planned until sizes[...] refused, naming a size the caller never gave
        raise TraceError(f"{label} is empty (shape {shape}); vectors, matrices and grids have at least one "
                         "entry along each axis", user_site())
    if dt not in (np.float32, np.float64):
        raise TraceError(f"{label} has dtype {dt}; kfuse runs float32 or float64", user_site())
    return shape, dt


class JitFunction:
    """A function traced and compiled per signature on first call (see the module docstring)."""

    def __init__(self, fn, library=None, fuse: bool = True, tuned=True, calibration=True,
                 vector_on_strips: bool = False):
        check_tuned(tuned)          # said at decoration, not at a first call's plan look-up
        check_flags(fuse=fuse, vector_on_strips=vector_on_strips)
        functools.update_wrapper(self, fn)
        self.fn = fn
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
                raise KfuseError(f"@kfuse.jit {fn.__name__}: parameter {p.name} must be an ordinary positional "
                                 "parameter (no *args, **kwargs or keyword-only parameters)")
        self._sig = sig
        self._n = len(sig.parameters)
        self._folders = library_folders(library)
        self._options = (fuse, tuned, calibration, vector_on_strips)
        self._library: Library | None = None
        self._code = fn.__code__
        self._entries: dict = {}        # fast key (per argument: type, rank, dtype) -> _Entry
        self.last: _Entry | None = None
        self._sized: tuple | None = None    # (entry, its program planned for the last .compile()'s sizes)
        self._names = tuple(sig.parameters)
        self._defaults = {p.name: p.default for p in sig.parameters.values() if p.default is not p.empty}
        self._positional_only = {p.name for p in sig.parameters.values() if p.kind == p.POSITIONAL_ONLY}
        self.op_target = torchop.JitTarget(self)        # kfuse::call's side of it (compiler/torchop.py)
        self.op_key = torchop.enrol(self.op_target)
        torchop.register()                     # where torch is imported already

    # -- the call --------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if torchop.compiling():                 # traced by torch.compile: one kfuse::call node
            return torchop.traced_call(self.op_key, self.fn.__name__, self._bound(args, kwargs))
        if kwargs or len(args) != self._n:
            args = self._bound(args, kwargs)
        entry = self._lookup(args)
        if entry is None:                       # called from a function being traced: inlined
            return self.fn(*args)
        res = entry.executor.call({name: args[k] for name, k in entry.inputs}, None, False, None)
        return res if entry.direct else entry.package(res, args)

    def _lookup(self, args: tuple, grad: bool = True) -> "_Entry | None":
        """The entry of these arguments' signature (traced and compiled on its first call), kept as
        ``last``; None for the arguments of a function being traced (``Proxy``: the caller inlines).
        ``grad``: refuse torch tensors that require grad (not inside ``kfuse::call``, where torch
        itself refuses a backward through the operator)."""
        if self.fn.__code__ is not self._code:      # the function was given new code
            self._code, self._entries = self.fn.__code__, {}
        key: list = []
        for a in args:
            t = type(a)
            if t is float or t is int:
                key.append(_NUMBER)
            elif t.__module__ == "torch":       # a dense or a sparse CSR tensor: its layout too
                if grad and a.requires_grad:
                    _refuse_grad(self.fn.__name__, self._names[len(key)])
                key.append((t, a.ndim, a.dtype, a.layout))
            else:
                try:
                    key.append((t, a.ndim, a.dtype))
                except AttributeError:      # a kfuse.CSR or a tuple: its values' dtype
                    key.append((t, getattr(a[2], "dtype", None)) if isinstance(a, tuple) and len(a) == 4 else t)
        tkey = tuple(key)
        entry = self._entries.get(tkey)
        if entry is None:
            if any(isinstance(a, Proxy) for a in args):
                return None
            entry = self._entries[tkey] = self._entry(args)
        self.last = entry
        return entry

    def _bound(self, args, kwargs) -> tuple:
        """The arguments in parameter order, by plain Python that TorchDynamo traces (no
        ``inspect``): keyword arguments by name, then the defaults; a call Python would refuse is a
        KfuseError saying why, in Python's words."""
        if not kwargs and len(args) == self._n:
            return args
        name = self.fn.__name__
        if len(args) > self._n:
            raise KfuseError(f"{name}(): too many positional arguments ({len(args)} given; it takes "
                             f"{self._n}: {', '.join(self._names)})")
        for k in kwargs:
            if k not in self._names or k in self._positional_only:
                raise KfuseError(f"{name}(): got an unexpected keyword argument {k!r}")
            if self._names.index(k) < len(args):
                raise KfuseError(f"{name}(): multiple values for argument {k!r}")
        bound = list(args)
        for p in self._names[len(args):]:
            if p in kwargs:
                bound.append(kwargs[p])
            elif p in self._defaults:
                bound.append(self._defaults[p])
            else:
                raise KfuseError(f"{name}(): missing a required argument: {p!r}")
        return tuple(bound)

    def run_separately(self, args: tuple) -> list:
        """The results ``kfuse::call`` returns for a call with ``args`` (compiler/torchop.py): each
        program output in a tensor of its own (no views of one block), then the returned scalar
        arithmetic, in the order of ``torchop.form_of``; arguments passed through are not among them."""
        from ..runtime.binding import result_shapes
        entry = self._lookup(args, grad=False)
        assert entry is not None
        like = next(a for a in args if hasattr(a, "new_empty"))
        shapes = tuple((name, tuple(args[k].shape)) for name, k in entry.inputs if hasattr(args[k], "shape"))
        want = entry.shapes.get(shapes)
        if want is None:
            if len(entry.shapes) >= 64:
                entry.shapes.clear()
            want = entry.shapes[shapes] = result_shapes(entry.lowered.program, dict(shapes))
        out = {name: like.new_empty(want[name]) for name in entry.lowered.outputs}
        res = entry.compiled.calls.executor.call({name: args[k] for name, k in entry.inputs}, out, False, None)
        outs = res if isinstance(res, tuple) else (res,)
        values = entry.scalars(outs, args)
        return [outs[k] if where == "out" else values[k] for where, k in entry.form.computed]

    def lowered(self, *args) -> tuple[Lowered, bool]:
        """(``trace``'s lowered trace, whether the function returns one value rather than a
        tuple) for these arguments."""
        specs, _ = self.specs(args)
        tr = trace(self.fn, specs, self.library)
        return library_calls(tr, self.fn.__name__), tr.single

    # -- tracing and compiling -------------------------------------------------------------------
    @property
    def library(self):
        if self._library is None:
            self._library = load_library(*self._folders)
        return self._library

    def specs(self, args) -> tuple[list[ArgSpec], np.dtype]:
        """What tracing knows of the arguments, and their element type; errors name the caller's line."""
        names = list(self._sig.parameters)
        specs, dtypes = [], {}
        for name, a in zip(names, args):
            if isinstance(a, bool) or a is None or isinstance(a, (str, bytes)):
                raise TraceError(f"argument {name} of {self.fn.__name__}: expected an array or a number, got "
                                 f"{type(a).__name__}", user_site())
            if isinstance(a, (int, float, np.generic)) or (isinstance(a, np.ndarray) and a.ndim == 0):
                specs.append(ArgSpec(name, "scalar"))
                continue
            if is_sparse(a):
                cshape, dt = csr_spec(self.fn.__name__, name, a)
                dtypes[name] = dt
                specs.append(ArgSpec(name, "csr", cshape))
                continue
            if not (hasattr(a, "shape") and hasattr(a, "dtype")):
                raise TraceError(f"argument {name} of {self.fn.__name__}: expected an array or a number, got "
                                 f"{type(a).__name__}", user_site())
            shape, dt = array_facts(a, f"argument {name} of {self.fn.__name__}")
            dtypes[name] = dt
            specs.append(ArgSpec(name, "dscalar" if not shape else "array", shape))
        if len(set(dtypes.values())) > 1:
            listed = ", ".join(f"{n} is {d}" for n, d in dtypes.items())
            raise TraceError(f"mixed dtypes in a call of {self.fn.__name__}: {listed}; a jitted function runs in "
                             "one element type (convert with .astype)", user_site())
        if not any(s.kind in ("array", "csr") for s in specs):
            raise TraceError(f"{self.fn.__name__} is called without a vector or matrix argument; nothing fixes "
                             "the sizes or the device", user_site())
        return specs, next(iter(dtypes.values()))

    def cache_key(self, *args, **kwargs) -> tuple:
        """The full key of the program a call with these arguments runs: the function's code, the
        library digest, the element type, each argument's kind and rank, and the options."""
        args = self._bound(args, kwargs)
        specs, dtype = self.specs(args)
        return (code_key(self.fn), self.library.digest, dtype.name,
                tuple((s.kind, len(s.shape)) for s in specs), repr(self._options))

    def trace(self, *args, **kwargs) -> Lowered:
        """The lowered trace a call with these arguments runs: its program (``.program``) and
        the program as a script (``.script``, what it shows at a prompt); NumPy arrays will do:
        only shapes and dtypes are read."""
        args = self._bound(args, kwargs)
        specs, _ = self.specs(args)
        return library_calls(trace(self.fn, specs, self.library), self.fn.__name__)

    def compile(self, *args, **kwargs):
        """The compiled program a call with these arguments runs (traced and compiled now if need be;
        NumPy arrays will do): planned for their sizes' class, as the call's executor resolves it
        (a signature's program is traced once, at the sizes it first came with)."""
        args = self._bound(args, kwargs)
        specs, dtype = self.specs(args)
        entry = self.last = self._entry(args, specs, dtype)     # .script, .explain() and .cuda_source describe it
        sized = entry.compiled.for_sizes(_sizes(entry.compiled.program, entry.inputs, specs))
        self._sized = (entry, sized)
        return sized

    def _entry(self, args, specs=None, dtype=None) -> _Entry:
        """The shared entry of these arguments' signature (``specs``, ``dtype``: ``self.specs(args)``,
        read here where not given)."""
        if specs is None:
            specs, dtype = self.specs(args)
        key = (code_key(self.fn), self.library.digest, dtype.name,
               tuple((s.kind, len(s.shape)) for s in specs), repr(self._options))
        entry = _SHARED.get(key)
        if entry is not None:
            return entry
        tr = trace(self.fn, specs, self.library)
        lowered, compiled = lower_and_compile(tr, self.fn.__name__, dtype, self.library, self._options)
        entry = _SHARED[key] = _Entry(compiled, lowered, tr.single, dtype, key)
        return entry

    # -- what the last call ran ------------------------------------------------------------------
    def _last(self) -> _Entry:
        if self.last is None:
            raise KfuseError(f"{self.fn.__name__} has not been called or compiled yet (call it, or use "
                             ".compile(*args): NumPy arrays will do)")
        return self.last

    @property
    def script(self) -> str:
        """The program of the last call's signature, as a script (for people: the program is
        built without it)."""
        return self._last().lowered.script

    @property
    def compiled(self):
        """The compiled program of the last signature: planned for the sizes of the last
        ``.compile()`` where that was of this signature, else for those it was traced at."""
        return self._last_compiled()

    def _last_compiled(self):
        e = self._last()
        return self._sized[1] if self._sized is not None and self._sized[0] is e else e.compiled

    @property
    def cuda_source(self) -> str:
        """The generated CUDA of the last call's signature."""
        return self._last_compiled().cuda_source

    def explain(self) -> str:
        """The traced script and the plan of the last call's signature (for the sizes it was
        compiled at)."""
        return f"{self._last().lowered.script}\n{self._last_compiled().describe()}"

    def __repr__(self) -> str:
        return f"<kfuse.jit {self.fn.__qualname__}: {len(self._entries)} signature(s)>"


def _sizes(program, inputs, specs) -> dict[int, int]:
    """Dimension id -> size of a traced program called with arguments of these ``specs``
    (``inputs``: program input name, argument index), by the call path's rules (a grid vector
    its entries, a CSR matrix its rows, columns and entries: ``ArgSpec.shape``)."""
    from ..runtime.binding import bind_sizes
    from ..runtime.grids import flat_shapes
    arg = dict(inputs)
    shapes = {v.name: tuple(specs[arg[v.name]].shape) for v in program.inputs if v.type != "scalar"}
    return bind_sizes(program, flat_shapes(program, shapes))


def lower_and_compile(tr: Trace, name: str, dtype: np.dtype, library: Library,
                      options: tuple) -> tuple[Lowered, CompiledScript]:
    """A traced function's program (named ``name``; errors name the user's line), planned and
    generated like any script's; the lowering and building are the compile's parse pass."""
    fuse, tuned, calibration, on_strips = options
    timer = PassTimes()
    with timer("parse"):
        lowered = library_calls(tr, name)
    try:
        return lowered, compile_program(lowered.program, library, dtype.name, fuse=fuse, sizes=lowered.sizes,
                                        tuned=tuned, calibration=calibration, vector_on_strips=on_strips,
                                        timer=timer)
    except TraceError:
        raise
    except ScriptError as e:        # the planner refused the program: no line of the user's to name
        raise KfuseError(f"{name}: the traced script is refused ({e}); the script:\n{lowered.script}") from None


def jit(fn=None, *, library=None, fuse: bool = True, tuned=True, calibration=True, vector_on_strips: bool = False):
    """Decorate a function over CuPy arrays / torch CUDA tensors (vectors, matrices, scalars as
    numbers or 0-d device arrays) to run it as one fused kfuse program.  ``library``: user
    library folder(s) beside the shipped BLAS (``kfuse.lib.<name>(...)`` calls their functions);
    ``fuse``, ``tuned``, ``calibration``, ``vector_on_strips`` as for ``kfuse.compile``.  Use as
    ``@kfuse.jit`` or ``@kfuse.jit(library=...)``.  A signature's program is traced at its first
    call and kept (as JAX's jit keeps it): numbers and functions the function reads from its
    closure, defaults or module are constants of it, so after rebinding one, decorate anew
    (programs are shared by what the function reads, ``code_key``)."""
    def wrap(f):
        if not callable(f) or not hasattr(f, "__code__"):
            raise KfuseError(f"@kfuse.jit decorates a Python function, got {type(f).__name__} {f!r:.60}")
        return JitFunction(f, library=library, fuse=fuse, tuned=tuned, calibration=calibration,
                           vector_on_strips=vector_on_strips)
    return wrap if fn is None else wrap(fn)


def _size(n) -> int:
    """One size of a duck-typed array's shape: an integer (``operator.index``), not a bool."""
    if isinstance(n, (bool, np.bool_)):
        raise TypeError("a bool is no size")
    return operator.index(n)


def _dtype(dt) -> np.dtype:
    """A NumPy, CuPy or torch dtype as NumPy's; None (which ``np.dtype`` reads as float64) is a
    TypeError."""
    if dt is None:
        raise TypeError("no dtype")
    try:
        return np.dtype(dt)
    except TypeError:
        return np.dtype(str(dt).removeprefix("torch."))      # a torch dtype


@functools.lru_cache(maxsize=256)
def _code_digest(code) -> str:
    return hashlib.sha256(marshal.dumps(code)).hexdigest()[:16]


def code_key(fn, depth: int = 0, memo: dict | None = None) -> tuple:
    """The function's bytecode and constants (nested functions included) and what it reads from
    outside -- its closure, its parameters' defaults and the module globals its code names:
    numbers (constants of the compiled program), the keys of the functions it calls (a wrapper
    ``lambda i, s: body(s)`` is a new program for each ``body``, whether ``body`` is a closure's
    or the module's), tuples, lists and dicts by their contents, modules by name, anything else by
    identity (``_value_key``).  Two
    closures of one function over different values are different programs, and so are two calls
    of one function whose globals were rebound between them.  ``memo``: each function reached is
    keyed once (functions of a module that call each other, a recursive one)."""
    memo = {} if memo is None else memo
    code = fn.__code__
    if id(fn) in memo:
        if memo[id(fn)] is None:        # reached again while its own key is being made: by identity
            _KEPT[id(fn)] = fn
            return ("function", _code_digest(code), id(fn))
        return memo[id(fn)]
    memo[id(fn)] = None
    glob = getattr(fn, "__globals__", None) or {}
    key = (_code_digest(code), tuple(_value_key(_cell(c), depth, memo) for c in fn.__closure__ or ()),
           tuple((name, _value_key(glob[name], depth, memo)) for name in _global_names(code) if name in glob),
           _value_key(getattr(fn, "__defaults__", None), depth, memo),
           _value_key(getattr(fn, "__kwdefaults__", None), depth, memo))
    memo[id(fn)] = key
    return key


@functools.lru_cache(maxsize=256)
def _global_names(code) -> tuple[str, ...]:
    """The names a code object and the functions nested in it look up (globals, and attribute names
    too: those that are no global are not found in the module and drop out)."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(_global_names(c))
    return tuple(sorted(names))


_KEPT: dict[int, object] = {}       # objects keyed by identity, kept alive so that no other takes their id


def _value_key(v, depth: int, memo: dict):
    """A hashable key of a value a traced function closes over or reads as a global, equal only for
    values that trace alike."""
    if v is None or isinstance(v, (bool, int, float, complex, str)):
        return (type(v).__name__, v)
    if isinstance(v, np.generic):
        return (type(v).__name__, v.item())
    if depth < 8:
        if isinstance(v, JitFunction):
            return code_key(v.fn, depth + 1, memo)
        if callable(v) and hasattr(v, "__code__"):
            return code_key(v, depth + 1, memo)
        if isinstance(v, (tuple, list)):
            return (type(v).__name__, tuple(_value_key(x, depth + 1, memo) for x in v))
        if isinstance(v, dict):
            return ("dict", tuple((_value_key(k, depth + 1, memo), _value_key(x, depth + 1, memo))
                                  for k, x in v.items()))
    if isinstance(v, types.ModuleType):
        return ("module", v.__name__)
    _KEPT[id(v)] = v
    return ("object", type(v).__qualname__, id(v))


def _cell(c):
    try:
        return c.cell_contents
    except ValueError:          # an empty cell
        return None


def is_sparse(a) -> bool:
    """A sparse matrix (SciPy, cupyx, torch sparse, kfuse.CSR or a 4-tuple): a csr input, not a
    dense array to trace."""
    from ..runtime.csr import is_csr
    return is_csr(a)


def csr_spec(fn: str, name: str, a) -> tuple[tuple[int, int, int], np.dtype]:
    """(rows, cols, nnz) and the values' dtype of a CSR argument (its arrays are not read:
    NumPy arrays in a kfuse.CSR will do for tracing); errors at the caller's line."""
    from ..errors import LaunchError
    from ..runtime.csr import INDEX_DTYPES, parts, shape_of
    if "sparse" in str(getattr(a, "layout", "")) and "csr" not in str(a.layout):
        raise TraceError(f"argument {name} of {fn}: a torch sparse tensor of layout {a.layout}; pass a CSR "
                         "tensor (.to_sparse_csr())", user_site())
    try:
        c = parts(a, name)
    except LaunchError as e:        # a SciPy (host) matrix, a cupyx matrix not in CSR format, ...
        raise TraceError(f"argument {name} of {fn}: {str(e).removeprefix(name + ': ')}", user_site()) from None
    got = shape_of(c.shape)
    if got is None:
        raise TraceError(f"argument {name} of {fn}: a CSR matrix's shape is (rows, columns), two positive "
                         f"integers, got {c.shape!r:.80}", user_site())
    rows, cols = got
    try:
        nnz = _size(c.indices.shape[0])
        dt, it = _dtype(c.data.dtype), _dtype(c.indices.dtype)
    except (TypeError, ValueError, AttributeError, IndexError):
        raise TraceError(f"argument {name} of {fn}: a CSR matrix of arrays indptr, indices, data and a shape "
                         "(rows, columns)", user_site()) from None
    if not (1 <= rows <= 2 ** 48 and 1 <= cols <= 2 ** 48 and 1 <= nnz <= 2 ** 48):
        raise TraceError(f"argument {name} of {fn}: a CSR matrix of shape ({rows}, {cols}) with {nnz} "
                         "non-zeros; kfuse takes one with rows, columns and non-zeros", user_site())
    if it not in INDEX_DTYPES:
        raise TraceError(f"argument {name} of {fn}: CSR column indices of dtype {it}; they are int32 or int64",
                         user_site())
    if dt not in (np.float32, np.float64):
        raise TraceError(f"argument {name} of {fn}: CSR values of dtype {dt}; kfuse runs float32 or float64",
                         user_site())
    return (rows, cols, nnz), dt
