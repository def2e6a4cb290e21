"""Python front end, part 1: tracing a function over proxies into an expression graph.

``trace(fn, args, library)`` calls ``fn`` with a proxy for each argument.  Operators on proxies
record nodes (nothing is computed): ``A @ x`` and ``A.T @ x`` (matrix-vector products; of a CSR
argument ``A @ x`` is ``spmv``), ``x @ y``
(a dot product), ``a * x``, ``x / a``, ``x + y``, ``x - y``, ``-x`` (linear combinations),
``kfuse.outer(u, v)``, ``kfuse.lib.<function>(...)`` (any library function by name) and scalar
arithmetic (``+ - * /``, unary ``-``, ``kfuse.sqrt`` or ``** 0.5``).  ``frontend/lower.py`` then
maps the graph onto library calls -- a whole expression at once, so ``a * (A @ x) + b * y`` is one
5-argument ``gemv`` -- and writes it as a script, which the script front end parses as usual.

Every node records where the user's code made it (file, line, column, source line): errors name
that line.  Anything that would need a value (``bool``, ``float``, comparisons, indexing) is an
error saying to move it out of the traced function.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import KfuseError, TraceError
from ..library.schema import Library
from .sites import Site, _raised_at, definition_site, user_site   # Site ...: the front end imports them here
_state = threading.local()
RANK_WORDS = {0: "scalar", 1: "vector", 2: "matrix", 3: "csr"}   # 3: a CSR matrix (shape rows, cols)
TYPE_RANKS = {w: r for r, w in RANK_WORDS.items()}


class Node:
    """One operation of the traced function.  ``kind``: arg, lit, matvec, scale, add, outer, dot,
    bin, neg, sqrt, call, out, T.  ``uses`` counts the nodes (and returns) that read it: a node
    read once is fused into its reader's library call, one read more often is computed once."""
    __slots__ = ("kind", "rank", "args", "data", "site", "uses", "shape")

    def __init__(self, kind: str, rank: int, args: tuple = (), data: Any = None, site: Site | None = None,
                 shape: tuple[int, ...] = ()):
        self.kind, self.rank, self.args, self.data, self.shape = kind, rank, args, data, shape
        self.site = site if site is not None else user_site()
        self.uses = 0
        for a in args:
            if isinstance(a, Node):
                a.uses += 1


def lit(x: float, site: Site | None = None) -> Node:
    x = float(x)
    if not math.isfinite(x):
        raise TraceError(f"the number {x} is not finite", site or user_site())
    return Node("lit", 0, data=x, site=site)


@dataclass(frozen=True)
class ArgSpec:
    """What tracing knows of an argument: ``kind`` array (rank 1 or 2), dscalar (a 0-d device
    array), scalar (a Python number) or csr (a CSR matrix; ``shape`` its rows, columns and
    non-zeros), and the shape of an array."""
    name: str
    kind: str
    shape: tuple[int, ...] = ()


@dataclass
class Trace:
    """The expression graph of a traced function: its argument nodes and what it returns."""
    args: list[Node]
    results: list[Node]
    single: bool                       # returned one value (not a tuple)
    library: Library
    names: list[str]


class Tracer:
    def __init__(self, library: Library):
        self.library = library


def _tracer() -> Tracer:
    t = getattr(_state, "tracer", None)
    if t is None:
        raise TraceError("kfuse.lib functions (and kfuse.outer of traced values) are used inside a @kfuse.jit "
                         "function", user_site())
    return t


def _node(x, what: str) -> Node:
    """The node of an operand: a proxy's, or a literal for a Python number."""
    if isinstance(x, Proxy):
        if x._tracer is not getattr(_state, "tracer", None):
            raise TraceError(f"{what}: a value traced by another call of a jitted function (do not keep "
                             "traced values past the function)", user_site())
        return x._node
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return lit(x)
    raise TraceError(f"{what}: a traced value cannot be combined with a {type(x).__name__} inside a "
                     "@kfuse.jit function (pass it as an argument)", user_site())


def _wrap(n: Node) -> "Proxy":
    return Proxy(n, _state.tracer)


def _mismatch(op: str, a: Node, b: Node) -> TraceError:
    return TraceError(f"{RANK_WORDS[a.rank]} {op} {RANK_WORDS[b.rank]} maps onto no library function",
                      user_site())


def _check_len(what: str, n: int, m: int) -> None:
    if n != m:
        raise TraceError(f"{what}: sizes {n} and {m} differ", user_site())


def _dense(n: Node, what: str) -> None:
    """Refuse a CSR matrix where only dense values go (it is read by spmv, A @ x, only)."""
    if n.rank == 3:
        raise TraceError(f"{what} of a CSR matrix maps onto no library function (a CSR matrix is read by "
                         "A @ x, spmv, only)", user_site())


def _linear(op: str, a: Node, b: Node) -> Node:
    _dense(a, op)
    _dense(b, op)
    if a.kind == "T" or b.kind == "T":
        raise TraceError("A.T is only used as the left operand of @ (A.T @ x is gemtv)", user_site())
    if a.rank != b.rank:
        raise _mismatch(op, a, b)
    if a.rank == 0:
        return Node("bin", 0, (a, b), op)
    if a.shape != b.shape:
        raise TraceError(f"{op}: shapes {a.shape} and {b.shape} differ", user_site())
    if op == "-":
        b = Node("scale", b.rank, (lit(-1.0), b), shape=b.shape)
    return Node("add", a.rank, (a, b), shape=a.shape)


def _scale(s: Node, x: Node, op: str) -> Node:
    _dense(x, op)
    if x.kind == "T":
        raise TraceError("A.T is only used as the left operand of @ (A.T @ x is gemtv)", user_site())
    if op == "/":
        s = Node("bin", 0, (lit(1.0), s), "/")
    return Node("scale", x.rank, (s, x), shape=x.shape)


def _mul(a: Node, b: Node) -> Node:
    if a.rank and b.rank:
        raise TraceError(f"{RANK_WORDS[a.rank]} * {RANK_WORDS[b.rank]}: an entrywise product maps onto no "
                         "library function (A @ x is a product, x @ y a dot product)", user_site())
    if not a.rank and not b.rank:
        return Node("bin", 0, (a, b), "*")
    return _scale(a, b, "*") if not a.rank else _scale(b, a, "*")


def _div(a: Node, b: Node) -> Node:
    if b.rank:
        raise TraceError(f"{RANK_WORDS[a.rank]} / {RANK_WORDS[b.rank]}: only division by a scalar maps onto the "
                         "library", user_site())
    return Node("bin", 0, (a, b), "/") if not a.rank else _scale(b, a, "/")


def _matmul(a: Node, b: Node) -> Node:
    _dense(b, "x @ A")
    if a.kind == "T" and b.rank == 1:
        A = a.args[0]
        _check_len("A.T @ x: the rows of A and the length of x", A.shape[0], b.shape[0])
        return Node("matvec", 1, (A, b), "T", shape=(A.shape[1],))
    if a.rank == 2 and b.rank == 1:
        _check_len("A @ x: the columns of A and the length of x", a.shape[1], b.shape[0])
        return Node("matvec", 1, (a, b), "N", shape=(a.shape[0],))
    if a.rank == 1 and b.rank == 2 and b.kind != "T":
        _check_len("x @ A: the length of x and the rows of A", a.shape[0], b.shape[0])
        return Node("matvec", 1, (b, a), "T", shape=(b.shape[1],))
    if a.rank == 1 and b.rank == 1:
        _check_len("x @ y: the lengths of x and y", a.shape[0], b.shape[0])
        return Node("dot", 0, (a, b))
    raise _mismatch("@", a, b)


def _refuse(what: str, hint: str):
    def method(self, *args, **kwargs):
        raise TraceError(f"{what} of a traced value: {hint}", user_site())
    return method


_VALUE = ("it depends on array values, which are on the GPU and not known while the function is "
          "traced; move the control flow out of the @kfuse.jit function (return the value and "
          "branch in the caller)")


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
        _dense(n, ".T")
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
        return _wrap(_linear("+", _node(self, '+'), _node(o, "+")))

    def __radd__(self, o):
        return _wrap(_linear("+", _node(o, "+"), _node(self, '+')))

    def __sub__(self, o):
        return _wrap(_linear("-", _node(self, '-'), _node(o, "-")))

    def __rsub__(self, o):
        return _wrap(_linear("-", _node(o, "-"), _node(self, '-')))

    def __mul__(self, o):
        return _wrap(_mul(_node(self, '*'), _node(o, "*")))

    def __rmul__(self, o):
        return _wrap(_mul(_node(o, "*"), _node(self, '*')))

    def __truediv__(self, o):
        return _wrap(_div(_node(self, '/'), _node(o, "/")))

    def __rtruediv__(self, o):
        return _wrap(_div(_node(o, "/"), _node(self, '/')))

    def __matmul__(self, o):
        if self._node.rank == 3:        # a CSR matrix times a vector: spmv
            return _call("spmv", (self, o))
        return _wrap(_matmul(_node(self, '@'), _node(o, "@")))

    def __rmatmul__(self, o):
        return _wrap(_matmul(_node(o, "@"), _node(self, '@')))

    def __neg__(self):
        n = _node(self, "-")
        if n.rank == 0:
            return _wrap(Node("neg", 0, (n,)))
        return _wrap(_scale(lit(-1.0), n, "*"))

    def __pos__(self):
        return self

    def __pow__(self, o):
        n = self._node
        if n.rank == 0 and o == 0.5:
            return _wrap(Node("sqrt", 0, (n,)))
        if n.rank == 0 and o == 2:
            return _wrap(Node("bin", 0, (n, n), "*"))
        raise TraceError("** : only s ** 0.5 (kfuse.sqrt) and s ** 2 of a scalar map onto the program", user_site())

    __bool__ = _refuse("bool()", _VALUE)
    __lt__ = __le__ = __gt__ = __ge__ = _refuse("a comparison", _VALUE)
    __eq__ = __ne__ = _refuse("== / !=", _VALUE)
    __float__ = _refuse("float()", "it would wait for the GPU; return the value from the @kfuse.jit function "
                        "and convert it outside (for a square root inside, use kfuse.sqrt(s) or s ** 0.5)")
    __int__ = __index__ = _refuse("int()", _VALUE)
    __getitem__ = __setitem__ = _refuse("indexing", "kfuse traces whole vectors and matrices; index outside the "
                                        "@kfuse.jit function")
    __iter__ = _refuse("iteration", "kfuse traces whole vectors and matrices")
    __len__ = _refuse("len()", "sizes are symbolic while tracing")
    __abs__ = _refuse("abs()", "no library function computes it")
    __array_ufunc__ = __array_function__ = _refuse("a NumPy function", "inside a @kfuse.jit function use "
                                                   "operators (A @ x, a * x + y) or kfuse.lib.<function>(...)")
    __array__ = _refuse("conversion to an array", "inside a @kfuse.jit function use operators (A @ x, a * x + y) "
                        "or kfuse.lib.<function>(...), not NumPy, CuPy or torch functions")
    __torch_function__ = classmethod(lambda cls, *a, **k: _refuse(
        "a torch function", "inside a @kfuse.jit function use operators or kfuse.lib.<function>(...)")(None))

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
        raise AttributeTraceError(f".{name} of a traced value: {_OPERATORS}", user_site())


_OPERATORS = ("a traced value supports + - * / @, .T (in A.T @ x), unary -, s ** 0.5 and s ** 2 of a "
              "scalar, kfuse.outer(u, v), kfuse.sqrt(s) and kfuse.lib.<function>(...)")


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


def outer(u, v):
    """The outer product u vᵀ: inside a @kfuse.jit function traced (``A + kfuse.outer(u, v)`` is
    ``ger``); outside, of NumPy / CuPy arrays or torch tensors, computed at once (so that a
    jitted function runs unchanged on NumPy, e.g. as its own reference)."""
    if not isinstance(u, Proxy) and not isinstance(v, Proxy):
        return u[:, None] * v[None, :]
    _tracer()
    a, b = _node(u, "outer"), _node(v, "outer")
    _dense(a, "outer")
    _dense(b, "outer")
    if a.rank != 1 or b.rank != 1:
        raise TraceError(f"outer(u, v) takes two vectors, got a {RANK_WORDS[a.rank]} and a {RANK_WORDS[b.rank]}",
                         user_site())
    return _wrap(Node("outer", 2, (a, b), shape=(a.shape[0], b.shape[0])))


def sqrt(s):
    """The square root of a scalar: of a traced scalar (evaluated on the device), or of a number
    or array (computed at once)."""
    if not isinstance(s, Proxy):
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


def trace(fn, specs: list[ArgSpec], library: Library, site_of=None) -> Trace:
    """Call ``fn`` on proxies of ``specs`` and collect what it returns.  ``site_of``: the
    function whose definition errors about the whole function name (default ``fn``; a loop's
    body when ``fn`` is kfuse's wrapper of it)."""
    tracer = Tracer(library)
    here = definition_site(site_of or fn)
    args = [_arg_node(s, here) for s in specs]
    prev = getattr(_state, "tracer", None)
    _state.tracer = tracer
    try:
        out = fn(*[Proxy(a, tracer) for a in args])
    except KfuseError:
        raise
    except Exception as e:      # noqa: BLE001 - the user's own Python failed while tracing: say where
        raise TraceError(f"{type(e).__name__} while tracing {fn.__name__}: {e}", _raised_at(e, here)) from None
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
