"""Python front end, part 1: tracing a function over proxies into an expression graph.

``trace(fn, args, library)`` calls ``fn`` with a proxy for each argument.  Operators on proxies
record nodes (nothing is computed): ``A @ x`` and ``A.T @ x`` (matrix-vector products; of a CSR
argument ``A @ x`` is ``spmv``), ``x @ y``
(a dot product), ``a * x``, ``x / a``, ``x + y``, ``x - y``, ``-x`` (linear combinations),
``kfuse.outer(u, v)``, ``kfuse.lib.<function>(...)`` (any library function by name) and scalar
arithmetic (``+ - * /``, unary ``-``, ``kfuse.sqrt`` or ``** 0.5``).  ``frontend/calls.py`` then
maps the graph onto library calls -- a whole expression at once, so ``a * (A @ x) + b * y`` is one
5-argument ``gemv`` -- and writes it as a script, which the script front end parses as usual.

Every node records where the user's code made it (file, line, column, source line): errors name
that line.  Anything that would need a value (``bool``, ``float``, comparisons, indexing) is an
error saying to move it out of the traced function.
"""
from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import KfuseError, TraceError
from ..library.schema import Library
from .sites import Site, raised_at, definition_site, user_site   # Site ...: the front end imports them here
from . import ewtrace, traceops as ops
from .tracenode import RANK_WORDS, TYPE_RANKS, ArgSpec, Node, lit   # noqa: F401 - the front end imports them here

_state = threading.local()


@dataclass
class Trace:
    """The expression graph of a traced function: its argument nodes and what it returns."""
    args: list[Node]
    results: list[Node]
    single: bool                       # returned one value (not a tuple)
    library: Library
    names: list[str]


class Tracer:
    """What one trace needs besides its proxies: the library, and whether in-place operators may
    update the arguments (``x += y``: a loop body's state, which the loop owns; a jitted function's
    arguments are its caller's arrays)."""
    def __init__(self, library: Library, args_in_place: bool = False):
        self.library, self.args_in_place = library, args_in_place
        self.arguments: set[int] = set()        # id() of the proxies the function was called with


def _tracer() -> Tracer:
    t = getattr(_state, "tracer", None)
    if t is None:
        raise TraceError("kfuse.lib functions (and kfuse.outer of traced values) are used inside a @kfuse.jit "
                         "function", user_site())
    return t


def _number(x) -> bool:
    """``x`` is a real number, a Python or a NumPy one (``np.float32(0.5)``, ``np.int64(3)``), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _node(x, what: str) -> Node:
    """The node of an operand: a proxy's, or a literal for a number."""
    if isinstance(x, Proxy):
        if x._tracer is not getattr(_state, "tracer", None):
            raise TraceError(f"{what}: a value traced by another call of a jitted function (do not keep "
                             "traced values past the function)", user_site())
        return x._node
    if _number(x):
        return lit(x)
    raise TraceError(f"{what}: a traced value cannot be combined with a {type(x).__name__} inside a "
                     "@kfuse.jit function (pass it as an argument)", user_site())


def _wrap(n: Node) -> "Proxy":
    return Proxy(n, _state.tracer)


def _refuse(what: str, hint: str):
    def method(self, *args, **kwargs):
        raise TraceError(f"{what} of a traced value: {hint}", user_site())
    return method


_VALUE = ("it depends on array values, which are on the GPU and not known while the function is "
          "traced; move the control flow out of the @kfuse.jit function (return the value and "
          "branch in the caller)")


def _comparison(op: str):
    """A comparison operator of traced vectors and matrices (elementwise: 0 or 1); of scalars it
    would need their values now, and is refused."""
    def method(self, o):
        a, b = _node(self, op), _node(o, op)
        if a.rank == 0 and b.rank == 0:
            _refuse("== / !=" if op in ("==", "!=") else "a comparison", _VALUE)(self)
        return _wrap(ewtrace.ew(op, [a, b]))
    return method


class Proxy:
    """A traced scalar, vector or matrix inside a @kfuse.jit function."""
    __slots__ = ("_node", "_tracer")
    __array_priority__ = 1000

    def __init__(self, node: Node, tracer: Tracer):
        self._node, self._tracer = node, tracer

    @property
    def ndim(self) -> int:
        return self._node.rank

    @property
    def T(self) -> "Proxy":
        n = self._node
        ops.dense(n, ".T")
        if n.rank < 2:
            return self
        if n.kind == "T":
            return _wrap(n.args[0])
        return _wrap(Node("T", 2, (n,), shape=n.shape[::-1]))

    def __repr__(self) -> str:
        return f"<kfuse traced {RANK_WORDS[self._node.rank]}>"

    def __hash__(self) -> int:
        return id(self)

    def __add__(self, o):
        return _wrap(ops.linear("+", _node(self, '+'), _node(o, "+")))

    def __radd__(self, o):
        return _wrap(ops.linear("+", _node(o, "+"), _node(self, '+')))

    def __sub__(self, o):
        return _wrap(ops.linear("-", _node(self, '-'), _node(o, "-")))

    def __rsub__(self, o):
        return _wrap(ops.linear("-", _node(o, "-"), _node(self, '-')))

    def __mul__(self, o):
        return _wrap(ops.mul(_node(self, '*'), _node(o, "*")))

    def __rmul__(self, o):
        return _wrap(ops.mul(_node(o, "*"), _node(self, '*')))

    def __truediv__(self, o):
        return _wrap(ops.div(_node(self, '/'), _node(o, "/")))

    def __rtruediv__(self, o):
        return _wrap(ops.div(_node(o, "/"), _node(self, '/')))

    def __matmul__(self, o):
        if self._node.rank == 3:        # a CSR matrix times a vector: spmv
            return _call("spmv", (self, o))
        return _wrap(ops.matmul(_node(self, '@'), _node(o, "@")))

    def __rmatmul__(self, o):
        return _wrap(ops.matmul(_node(o, "@"), _node(self, '@')))

    def __neg__(self):
        n = _node(self, "-")
        if n.rank == 0:
            return _wrap(Node("neg", 0, (n,)))
        if n.boolean:
            return _wrap(ewtrace.ew("neg", [n]))        # refused, as NumPy refuses it
        return _wrap(ops.scale(lit(-1.0), n, "*"))

    def __pos__(self):
        return _wrap(self._node)        # a new array, as NumPy's +x is (an in-place update leaves x as it was)

    def __pow__(self, o):
        n = self._node
        if not _number(o):
            raise TraceError("** takes a number as its exponent (x ** 2, x ** 0.5)", user_site())
        return _wrap(ewtrace.ew("pow", [_node(self, "**"), lit(o)]))

    def __abs__(self):
        return _wrap(ewtrace.ew("abs", [_node(self, "abs")]))

    __lt__, __le__, __gt__, __ge__ = _comparison("<"), _comparison("<="), _comparison(">"), _comparison(">=")
    __eq__, __ne__ = _comparison("=="), _comparison("!=")

    def __getitem__(self, key):
        return _wrap(ewtrace.index(_node(self, "indexing"), key))

    __bool__ = _refuse("bool()", _VALUE)
    __float__ = _refuse("float()", "it would wait for the GPU; return the value from the @kfuse.jit function "
                        "and convert it outside (for a square root inside, use kfuse.sqrt(s) or s ** 0.5)")
    __int__ = __index__ = _refuse("int()", _VALUE)
    __setitem__ = _refuse("assignment into a traced value", "kfuse traces whole vectors and matrices; "
                          "return the new value instead")
    __iter__ = _refuse("iteration", "kfuse traces whole vectors and matrices")
    __len__ = _refuse("len()", "sizes are symbolic while tracing")
    __array__ = _refuse("conversion to an array", "inside a @kfuse.jit function use operators and NumPy's or "
                        "torch's functions of traced values, not conversions")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "reduce" and ufunc.__name__ in ("add", "maximum", "minimum"):
            name = {"add": "sum", "maximum": "max", "minimum": "min"}[ufunc.__name__]
            return apply(name, inputs, kwargs)
        if method != "__call__":
            _refuse(f"np.{ufunc.__name__}.{method}", f"kfuse traces {ewtrace.SUPPORTED}")(self)
        return apply(ufunc.__name__, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return apply(func.__name__, args, kwargs)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name.startswith("__") and name.endswith("__"):      # a Tensor operator: Python's own
            import operator
            op = name.strip("_")
            if op.startswith("r") and op[1:] in ("add", "sub", "mul", "truediv", "matmul", "pow"):
                return getattr(operator, op[1:])(args[1], args[0])
            if hasattr(operator, op):
                return getattr(operator, op)(*args)
        return apply(name, args, kwargs or {})

    @property
    def __cuda_array_interface__(self):
        _refuse("conversion to a device array", "inside a @kfuse.jit function use operators (A @ x, a * x + y) "
                "or kfuse.lib.<function>(...), not CuPy or torch functions")(self)

    @property
    def shape(self):
        _refuse(".shape", "sizes are symbolic while tracing (the program is compiled for any size)")(self)

    def __getattr__(self, name: str):
        if name.startswith("__"):       # protocols probed by NumPy, CuPy, torch, copy: not there
            raise AttributeError(name)
        if name in _METHODS:            # x.sum(), x.max(), r.norm(), x.clamp(0, 1), x.exp() ...
            return lambda *args, **kwargs: apply(name, (self, *args), kwargs)
        raise AttributeTraceError(f".{name} of a traced value: {_OPERATORS}", user_site())


_OPERATORS = ("a traced value supports + - * / ** @, comparisons, abs, .T (in A.T @ x), v[:, None] and v[None, :], "
              "the methods .sum() .max() .min() .mean() .norm() .clip() .clamp() and NumPy's and torch's "
              f"functions of them ({ewtrace.SUPPORTED}), kfuse.outer(u, v), kfuse.sqrt(s) and "
              "kfuse.lib.<function>(...)")
_METHODS = {"sum", "max", "min", "mean", "norm", "clip", "clamp", "abs", "exp", "log", "sqrt", "tanh", "sin",
            "cos", "sigmoid", "relu", "square", "dot", "matmul", "maximum", "minimum", "amax", "amin", "copy",
            "clone"}


def apply(name: str, args: tuple, kwargs: dict):
    """NumPy's or torch's function ``name`` (or kfuse's of the same name) of traced values."""
    import math
    kwargs = dict(kwargs)
    what = f"{name}()"
    if name in ("dot", "matmul", "mv", "vdot", "inner") and len(args) == 2 and not kwargs:
        return _wrap(ops.matmul(_node(args[0], what), _node(args[1], what)))
    if name in ("outer", "ger") and len(args) == 2 and not kwargs:
        return outer(*args)
    if name in ("copy", "clone") and len(args) == 1 and not kwargs:     # x.copy(), np.copy(x), torch's x.clone()
        return _wrap(_node(args[0], what))
    if name in ("max", "min", "amax", "amin", "sum", "mean"):
        axis = kwargs.pop("axis", kwargs.pop("dim", None))
        if len(args) == 2 and axis is None and (args[1] is None or (isinstance(args[1], numbers.Integral)
                                                                    and not isinstance(args[1], bool))):
            axis = args[1]                      # x.max(0), np.sum(A, 1): the axis by position, as NumPy takes it
            args = args[:1]
        if len(args) == 2 and name in ("max", "min") and not kwargs and axis is None:
            name = "maximum" if name == "max" else "minimum"        # torch.max(a, b)
        elif len(args) == 1 and not kwargs:
            return _wrap(ewtrace.reduce(name, _node(args[0], what), axis))
    if name == "norm":
        order = kwargs.pop("ord", kwargs.pop("p", 2 if len(args) < 2 else args[1]))
        if len(args) <= 2 and not kwargs and (order is None or isinstance(order, (int, float))):
            return _wrap(ewtrace.norm(_node(args[0], what), math.inf if order == float("inf") else order))
    if name in ("clip", "clamp"):
        lo, hi = kwargs.pop("min", kwargs.pop("a_min", None)), kwargs.pop("max", kwargs.pop("a_max", None))
        rest = list(args[1:]) + [lo, hi][len(args) - 1:]
        if not kwargs and len(rest) == 2:
            nodes = [_node(args[0], what)]
            x = nodes[0]
            if rest[0] is not None:
                x = ewtrace.ew("maximum", [x, _node(rest[0], what)])
            if rest[1] is not None:
                x = ewtrace.ew("minimum", [x, _node(rest[1], what)])
            return _wrap(x)
    name = ewtrace.canonical(name)
    if name in ewtrace.ELEMENTWISE and not kwargs:
        return _wrap(ewtrace.ew(name, [_node(a, what) for a in args]))
    raise TraceError(f"{what}" + (f" with {', '.join(kwargs)}=" if kwargs else "") + " of a traced value: kfuse "
                     f"traces {ewtrace.SUPPORTED}", user_site())


class AttributeTraceError(TraceError, AttributeError):
    """An unknown attribute of a traced value: a TraceError for the user, an AttributeError for
    hasattr() and getattr(obj, name, default)."""


def _no_operator(symbol: str):
    def method(self, *args):
        raise TraceError(f"{symbol} of a traced value maps onto no library function: {_OPERATORS}", user_site())
    return method


for _name, _symbol in (("floordiv", "//"), ("mod", "%"), ("divmod", "divmod()"), ("and", "&"), ("or", "|"),
                       ("xor", "^"), ("lshift", "<<"), ("rshift", ">>")):
    setattr(Proxy, f"__{_name}__", _no_operator(_symbol))
    setattr(Proxy, f"__r{_name}__", _no_operator(_symbol))
for _name, _symbol in (("invert", "~"), ("round", "round()"), ("trunc", "math.trunc()"), ("floor", "math.floor()"),
                       ("ceil", "math.ceil()"), ("complex", "complex()"), ("rpow", "** (a traced exponent)"),
                       ("contains", "in"), ("call", "a call")):
    setattr(Proxy, f"__{_name}__", _no_operator(_symbol))


def _in_place(op: str, symbol: str):
    """``x += y`` and its kin as NumPy does them: a vector or matrix is updated in place, so every
    name bound to it sees the new value (after ``z = t; t += y`` z is the new t too); a scalar
    (a Python or NumPy number) is rebound.  An argument is refused: the caller's array would be
    written, and a jitted function returns its results instead."""
    def method(self, o):
        new = getattr(self, f"__{op}__")(o)
        n = self._node
        argument = id(self) in self._tracer.arguments and not self._tracer.args_in_place
        if n.rank == 0 and not (argument and n.data.kind == "dscalar"):
            return new
        if argument:
            name = n.data.name
            raise TraceError(f"{name} {symbol} ... would write argument {name} in place, which a jitted function "
                             f"does not do: write {name} = {name} {symbol[:-1]} ... and return {name}", user_site())
        if new._node.shape != n.shape:
            raise TraceError(f"{symbol}: the result's shape {new._node.shape} is not that of the value updated in "
                             f"place, {n.shape}", user_site())
        self._node = new._node
        return self
    return method


for _name, _symbol in (("add", "+="), ("sub", "-="), ("mul", "*="), ("truediv", "/="), ("pow", "**=")):
    setattr(Proxy, f"__i{_name}__", _in_place(_name, _symbol))


def outer(u, v):
    """The outer product u vᵀ: inside a @kfuse.jit function traced (``A + kfuse.outer(u, v)`` is
    ``ger``); outside, of NumPy / CuPy arrays or torch tensors, computed at once (so that a
    jitted function runs unchanged on NumPy, e.g. as its own reference)."""
    if not isinstance(u, Proxy) and not isinstance(v, Proxy):
        return u[:, None] * v[None, :]
    _tracer()
    a, b = _node(u, "outer"), _node(v, "outer")
    ops.dense(a, "outer")
    ops.dense(b, "outer")
    if a.rank != 1 or b.rank != 1:
        raise TraceError(f"outer(u, v) takes two vectors, got a {RANK_WORDS[a.rank]} and a {RANK_WORDS[b.rank]}",
                         user_site())
    return _wrap(Node("outer", 2, (a, b), shape=(a.shape[0], b.shape[0])))


def sqrt(s):
    """The square root of a scalar: of a traced scalar (evaluated on the device), or of a number
    or array (computed at once).  A negative Python number gives NaN, as the device and NumPy
    give (``-4.0 ** 0.5`` is a complex number in Python: a reference that differed from the
    device's result, and a complex constant inside a traced function)."""
    if not isinstance(s, Proxy):
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            return math.sqrt(s) if s >= 0 else math.nan
        return s ** 0.5
    if s._node.rank:
        raise TraceError("kfuse.sqrt takes a scalar", user_site())
    return _wrap(Node("sqrt", 0, (_node(s, "sqrt"),)))


class _Lib:
    """``kfuse.lib.<function>(...)``: a call of any library function by name (or alias), inside a
    @kfuse.jit function; scalars may be traced scalars or numbers.  Outside one, on NumPy arrays,
    the shipped function's float64 reference expression is evaluated (a jitted function then runs
    unchanged on NumPy as its own reference)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args):
            return _call(name, args)
        call.__name__ = name
        return call


lib = _Lib()


def _call(name: str, args: tuple):
    if getattr(_state, "tracer", None) is None and not any(isinstance(a, Proxy) for a in args):
        return _reference_call(name, args)
    library = _tracer().library
    site = user_site()
    overloads = library.overloads(name)
    if not overloads:
        import difflib
        names = sorted({n for f in library.functions for n in (f.name, *f.aliases)})
        close = difflib.get_close_matches(name, names, 1)
        raise TraceError(f"unknown library function {name}" + (f" (did you mean {close[0]}?)" if close else ""), site)
    fn = next((f for f in overloads if len(f.inputs) == len(args)), None)
    if fn is None:
        raise TraceError(f"{name} takes {' or '.join(str(len(f.inputs)) for f in overloads)} arguments, "
                         f"{len(args)} given ({'; '.join(f.signature for f in overloads)})", site)
    nodes: list = []
    sizes: dict = {}
    for k, (p, a) in enumerate(zip(fn.inputs, args), 1):
        n = _node(a, f"argument {k} ({p.name}) of {name}")
        rank = TYPE_RANKS[p.type]
        if n.kind == "T":
            raise TraceError(f"argument {k} ({p.name}) of {name}: pass the matrix, not A.T", site)
        if n.rank != rank:
            raise TraceError(f"argument {k} ({p.name}) of {name} must be a {p.type}, got a {RANK_WORDS[n.rank]}", site)
        for axis, size in zip(p.index, n.shape):
            if sizes.setdefault(axis, size) != size:
                raise TraceError(f"argument {k} ({p.name}) of {name}: size {size} does not match the other "
                                 f"arguments ({sizes[axis]})", site)
        nodes.append(n)
    for k, (p, n) in enumerate(zip(fn.inputs, nodes), 1):     # a gathered x: its length another's size
        for size, ref in zip(n.shape, p.size):
            other, word = ref.split(".")
            src = nodes[[q.name for q in fn.inputs].index(other)]
            want = src.shape[0] if src.rank == 1 else src.shape[("rows", "cols").index(word)]
            if size != want:
                raise TraceError(f"argument {k} ({p.name}) of {name}: its size {size} must be {other}'s "
                                 f"{'length' if word == 'len' else word} ({want})", site)
    call = Node("call", -1, tuple(nodes), fn, site)
    outs = [_wrap(Node("out", {"scalar": 0, "vector": 1, "matrix": 2}[p.type], (call,), k, site,
                       tuple(sizes.get(a, 0) for a in p.index))) for k, p in enumerate(fn.outputs)]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _reference_call(name: str, args: tuple):
    from ..library import expr
    from ..library.loader import shipped_library
    fn = next((f for f in shipped_library().overloads(name) if len(f.inputs) == len(args)), None)
    if fn is None or fn.reference is None:
        raise TraceError(f"kfuse.lib.{name} with {len(args)} arguments is no shipped function with a reference; "
                         "call library functions inside a @kfuse.jit function", user_site())
    return expr.evaluate(fn.reference, {p.name: a for p, a in zip(fn.inputs, args)}, fn.reference_kind)


def _arg_node(s: ArgSpec, here) -> Node:
    """The node of an argument: a 3-D array is a vector laid out as a grid (its length the
    product of its shape; the binding takes the shape: runtime/grids.py)."""
    if s.kind == "array" and len(s.shape) == 3:
        return Node("arg", 1, data=s, site=here, shape=(s.shape[0] * s.shape[1] * s.shape[2],))
    if s.kind == "csr":
        return Node("arg", 3, data=s, site=here, shape=s.shape[:2])
    return Node("arg", {"array": len(s.shape), "dscalar": 0, "scalar": 0}[s.kind], data=s, site=here,
                shape=s.shape)


def trace(fn, specs: list[ArgSpec], library: Library, site_of=None, args_in_place: bool = False) -> Trace:
    """Call ``fn`` on proxies of ``specs`` and collect what it returns.  ``site_of``: the
    function whose definition errors about the whole function name (default ``fn``; a loop's
    body when ``fn`` is kfuse's wrapper of it).  ``args_in_place``: in-place operators may
    update the arguments (a loop body's state)."""
    tracer = Tracer(library, args_in_place)
    here = definition_site(site_of or fn)
    args = [_arg_node(s, here) for s in specs]
    prev = getattr(_state, "tracer", None)
    _state.tracer = tracer
    try:
        proxies = [Proxy(a, tracer) for a in args]
        tracer.arguments = {id(p) for p in proxies}
        out = fn(*proxies)
    except KfuseError:
        raise
    except Exception as e:      # noqa: BLE001 - the user's own Python failed while tracing: say where
        raise TraceError(f"{type(e).__name__} while tracing {fn.__name__}: {e}", raised_at(e, here)) from None
    finally:
        _state.tracer = prev
    single = not isinstance(out, (tuple, list))
    items = [out] if single else list(out)
    if out is None or not items:
        raise TraceError(f"{fn.__name__} returns nothing; a jitted function returns its results", here)
    results = []
    for k, x in enumerate(items):
        if not isinstance(x, Proxy) or x._tracer is not tracer:
            raise TraceError(f"{fn.__name__} returns a {type(x).__name__} as result {k + 1}; it may return traced "
                             "values only", here)
        if x._node.kind == "T":
            raise TraceError(f"{fn.__name__} returns A.T; transposes are only used in A.T @ x", x._node.site)
        x._node.uses += 1
        results.append(x._node)
    return Trace(args, results, single, library, [s.name for s in specs])
