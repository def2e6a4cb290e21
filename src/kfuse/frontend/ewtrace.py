"""Python front end: elementwise operators, functions and reductions of traced values.

``x * y``, ``x + 2.0``, ``abs(r)``, ``np.exp(w)``, ``torch.clamp(x, 0, 1)``, ``d[:, None] * A``,
``(w * r * r).sum()``, ``np.linalg.norm(r, np.inf)``: each makes an ``ew``, ``bcast`` or ``red``
node (``frontend/tracenode.py``) with NumPy's broadcasting of shapes; ``frontend/calls.py`` writes
each largest elementwise region as one expression statement, which the builder makes one
synthesized function (``frontend/ewbuild.py``, ``library/synth.py``).

:func:`apply` is the one entry point of the NumPy and torch protocols (``__array_ufunc__``,
``__array_function__``, ``__torch_function__``) and of ``kfuse.exp`` and its kin: it takes a
function's name as NumPy or torch spells it and its operands as nodes.  Scalar-only operands keep
scalar arithmetic (``+ - * /``, unary ``-``, ``sqrt``), evaluated on the device as before.
"""
from __future__ import annotations

import math

from ..errors import TraceError
from ..library import ewexpr
from .sites import user_site
from .tracenode import RANK_WORDS, Node, lit

# NumPy's and torch's names of the elementwise operations -> ewexpr's
ALIASES = {"add": "+", "subtract": "-", "sub": "-", "multiply": "*", "mul": "*", "true_divide": "/",
           "divide": "/", "div": "/", "negative": "neg", "absolute": "abs", "fabs": "abs", "power": "pow",
           "less": "<", "lt": "<", "less_equal": "<=", "le": "<=", "greater": ">", "gt": ">",
           "greater_equal": ">=", "ge": ">=", "equal": "==", "eq": "==", "not_equal": "!=", "ne": "!=",
           "clamp": "clip"}
ELEMENTWISE = set(ewexpr.UNARY) | set(ewexpr.BINARY) | {"where", "clip", "square", "reciprocal", "relu",
                                                        "positive"}
REDUCTIONS = {"sum": "sum", "max": "max", "amax": "max", "min": "min", "amin": "min", "mean": "mean"}
SUPPORTED = ("operators + - * / ** (a number), comparisons, abs; exp, log, sqrt, tanh, sin, cos, sigmoid, "
             "maximum, minimum, where, clip; sum, max, min, mean, norm; a matrix's sum(axis=0 or 1); dot, matmul, "
             "outer; "
             "v[:, None] and v[None, :]")


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def _operand(n: Node, what: str) -> None:
    if n.rank == 3:
        raise TraceError(f"{what} of a CSR matrix: a CSR matrix is read by A @ x (spmv) only", user_site())
    if n.kind == "T":
        raise TraceError(f"{what} of A.T: a transpose is only used in A.T @ x (gemtv)", user_site())


def _shape(n: Node) -> tuple[int, ...]:
    return n.shape if n.rank else ()


def broadcast(what: str, nodes: list[Node]) -> tuple[tuple[int, ...], frozenset[int]]:
    """NumPy's broadcast of the operands' shapes (a vector beside a matrix runs along its
    columns), and the axes of size 1 of the result that still stretch (``Node.stretch``); a
    TraceError at the user's line where they do not fit.  Only a broadcast vector's missing axis
    stretches (``v[:, None]``, ``v[None, :]``, a vector beside a matrix): a vector or a matrix
    whose own size is 1 does not (its entries are read at its size, not repeated)."""
    shapes = [_shape(n) for n in nodes]
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    listed = " and ".join(str(s) for s in shapes if s)
    for s in shapes:
        for k, d in enumerate(s, rank - len(s)):
            if out[k] == 1:
                out[k] = d
            elif d not in (1, out[k]):
                raise TraceError(f"{what}: shapes {listed} do not broadcast together", user_site())
    stretch = set(range(rank))
    for n, s in zip(nodes, shapes):
        lead = rank - len(s)
        for k, d in enumerate(s, lead):
            if d == 1 and k - lead not in n.stretch:
                if out[k] != 1:
                    raise TraceError(f"{what}: shapes {listed}: kfuse broadcasts no size of 1 of a vector or "
                                     "matrix (a vector is broadcast as v[:, None] or v[None, :], or beside a "
                                     "matrix along its columns)", user_site())
                stretch.discard(k)
    return tuple(out), frozenset(k for k in stretch if out[k] == 1)


def ew(op: str, nodes: list[Node]) -> Node:
    """An elementwise operation (``op`` in ewexpr's names, or clip / square / reciprocal / relu)."""
    op = canonical(op)
    for n in nodes:
        _operand(n, op)
    if op == "positive":
        return nodes[0]
    if op == "square":
        return ew("pow", [nodes[0], lit(2.0)])
    if op == "reciprocal":
        return ew("/", [lit(1.0), nodes[0]])
    if op == "relu":
        return ew("maximum", [nodes[0], lit(0.0)])
    if op == "clip":
        x, lo, hi = nodes
        return ew("minimum", [ew("maximum", [x, lo]), hi])
    want = ewexpr.arity(op)
    if len(nodes) != want:
        raise TraceError(f"{op} takes {want} operand(s), {len(nodes)} given", user_site())
    if all(n.rank == 0 for n in nodes):
        return _scalar(op, nodes)
    if op == "pow":
        why = ewexpr.check_power(("num", nodes[1].data) if nodes[1].kind == "lit" else ("in", 0))
        if why:
            raise TraceError(why, user_site())
    op, boolean = _booleans(op, nodes)
    shape, stretch = broadcast(op, nodes)
    return Node("ew", len(shape), tuple(nodes), op, shape=shape, stretch=stretch, boolean=boolean)


def _booleans(op: str, nodes: list[Node]) -> tuple[str, bool]:
    """(the operation, whether its result is boolean) as NumPy computes it where comparisons'
    bools take part: comparisons, products, maxima, minima and absolute values of bools stay
    bools (the same 1 and 0 as numbers), the sum of two is their logical or (a maximum), and a
    difference or negation of bools is refused, as NumPy refuses it."""
    flags = [n.boolean for n in nodes]
    if op in ("-", "neg") and all(flags):
        raise TraceError("- of comparisons' results (arrays of bools): NumPy refuses it; make them numbers "
                         "first ((x > y) * 1.0)", user_site())
    if op == "+" and all(flags):
        return "maximum", True          # NumPy's bool + bool is their logical or
    return op, op in ewexpr.COMPARE or (op in ("*", "maximum", "minimum", "abs") and all(flags)) or \
        (op == "where" and all(flags[1:]))


def _scalar(op: str, nodes: list[Node]) -> Node:
    """An operation of scalars: scalar arithmetic where it is one, else an error."""
    if op in ewexpr.ARITH:
        return Node("bin", 0, tuple(nodes), op)
    if op == "neg":
        return Node("neg", 0, tuple(nodes))
    if op == "sqrt":
        return Node("sqrt", 0, tuple(nodes))
    if op == "pow" and nodes[1].kind == "lit" and nodes[1].data in (0.5, 2.0):
        a = nodes[0]
        return Node("sqrt", 0, (a,)) if nodes[1].data == 0.5 else Node("bin", 0, (a, a), "*")
    raise TraceError(f"{op} of scalars: scalar arithmetic is + - * /, unary -, sqrt and ** 2; "
                     f"{op} applies to vectors and matrices (return the scalar and compute it outside)", user_site())


def bcast(n: Node, which: str) -> Node:
    """``v[:, None]`` (which = "row": entry i along row i) or ``v[None, :]`` ("col")."""
    _operand(n, "indexing")
    if n.rank != 1:
        raise TraceError(f"[:, None] / [None, :] broadcast a vector; this is a {RANK_WORDS[n.rank]}", user_site())
    shape = (n.shape[0], 1) if which == "row" else (1, n.shape[0])
    return Node("bcast", 2, (n,), which, shape=shape, stretch=frozenset({1 if which == "row" else 0}),
                boolean=n.boolean)


def index(n: Node, key) -> Node:
    """``v[:, None]`` and ``v[None, :]`` (also ``np.newaxis``); any other index is refused."""
    full = slice(None)
    if isinstance(key, tuple) and len(key) == 2:
        if key[0] == full and key[1] is None:
            return bcast(n, "row")
        if key[0] is None and key[1] == full:
            return bcast(n, "col")
    raise TraceError("indexing of a traced value: kfuse traces whole vectors and matrices (v[:, None] and "
                     "v[None, :] broadcast a vector); index outside the @kfuse.jit function", user_site())


def reduce(op: str, n: Node, axis=None) -> Node:
    """A reduction of a vector expression into a scalar."""
    op = REDUCTIONS[op]
    _operand(n, op)
    if n.rank == 2 and op == "sum" and axis in (0, 1, -1, -2):        # A.sum(axis=1): the row sums
        rows = axis in (1, -1)
        return Node("red", 1, (n,), "rowsum" if rows else "colsum", shape=(n.shape[0] if rows else n.shape[1],))
    if axis not in (None, 0, -1) or (axis is not None and n.rank != 1):
        raise TraceError(f"{op} along an axis: kfuse reduces a whole vector, and sums a matrix along its rows "
                         "or columns (A.sum(axis=1), A.sum(axis=0))", user_site())
    if n.rank != 1:
        raise TraceError(f"{op} of a {RANK_WORDS[n.rank]}: kfuse reduces vector expressions into a scalar",
                         user_site())
    if op == "mean":            # the sum over the count of entries (of a vector the expression reads)
        return Node("bin", 0, (Node("red", 0, (n,), "sum"), Node("red", 0, (_leaf(n),), "count")), "/")
    return Node("red", 0, (n,), op)


def _leaf(n: Node) -> Node:
    """A vector an elementwise expression reads (its length is the expression's)."""
    while n.kind in ("ew", "add", "scale"):
        n = next(a for a in (n.args[::-1] if n.kind == "scale" else n.args) if a.rank == 1)
    return n


def norm(n: Node, ord=None) -> Node:
    """The 2-norm (default), the max-norm (``ord=inf``) or the 1-norm of a vector."""
    if ord is None or ord == 2:
        return Node("sqrt", 0, (reduce("sum", ew("*", [n, n])),))
    if ord == math.inf:
        return reduce("max", ew("abs", [n]))
    if ord == 1:
        return reduce("sum", ew("abs", [n]))
    raise TraceError(f"norm of order {ord!r}: kfuse computes the 2-norm, the max-norm (inf) and the 1-norm",
                     user_site())
