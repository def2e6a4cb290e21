"""The library's expression fields (``reference``, ``flops``), checked and evaluated without ``eval``.

An expression is parsed with :mod:`ast` and every node checked against what the library format
documents; anything else is refused when the library is loaded.  Evaluation walks the checked
tree with the same Python and NumPy operations ``eval`` would call, in the same order, so results
are bit-identical.

Allowed (``reference``): numeric literals, names of the function's inputs, ``+ - * / @`` and
unary ``- +``, ``** k`` with a literal exponent of at most 8 in magnitude, ``E.T``, the calls
``np.dot``, ``np.outer``, ``np.sum`` (optionally ``axis=<int>``), ``np.abs``, ``abs`` and
``np.triu(E)`` / ``np.triu(E, k)`` (a matrix's upper triangle from diagonal k, a literal int of at
most 8 in magnitude; E must be a matrix), and a tuple of expressions for several outputs.  A
stencil's reference (``grid_reference``: a function declaring ``grid``) may also call the grid
helpers ``cross(u)`` and ``box(u)``, optionally with a second argument ``fill`` (a number or an
array of u's shape): over a 2-D or 3-D grid ``u``, the sum of u at each point and its 2 x rank
axis neighbours (``cross``: the 5- or 7-point star) or its whole 3 x 3 (x 3) box (``box``: 9 or 27
points), a neighbour past the grid's edge reading as ``fill`` at the point (default 0: the "zero"
boundary rule).  ``flops``: literals, parameter names, ``+ - * //`` and unary ``-``.
"""
from __future__ import annotations

import ast
import functools
import operator
from typing import Any, Callable

import numpy as np

from ..errors import KfuseError

MAX_DEPTH = 64
MAX_LENGTH = 2000
MAX_POWER = 8

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.MatMult: operator.matmul, ast.Pow: operator.pow,
           ast.FloorDiv: operator.floordiv}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_DIAGONAL = 8


def _triu(m, k: int = 0):
    """``np.triu`` of a matrix only: of a vector NumPy would build an n x n matrix."""
    if np.ndim(m) != 2:
        raise ValueError(f"np.triu takes a matrix, got {np.ndim(m)} dimension(s)")
    return np.triu(m, k)


_NP_CALLS: dict[str, Callable[..., Any]] = {"dot": np.dot, "outer": np.outer, "sum": np.sum, "abs": np.abs,
                                            "triu": _triu,
                                            # the elementwise functions and reductions of synthesized
                                            # functions' references (library/synth.py)
                                            "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
                                            "sin": np.sin, "cos": np.cos, "maximum": np.maximum,
                                            "minimum": np.minimum, "where": np.where, "max": np.max,
                                            "min": np.min, "atleast_2d": np.atleast_2d}
_NARGS = {"dot": 2, "outer": 2, "maximum": 2, "minimum": 2, "where": 3}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}



def _shifted(u: np.ndarray, offset: tuple[int, ...], fill) -> np.ndarray:
    """u read at ``offset`` from each point (``out[x] = u[x + offset]``), ``fill`` (a number, or
    an array of u's shape read at the point) where x + offset leaves the grid."""
    out = np.array(np.broadcast_to(np.asarray(fill, dtype=np.float64), u.shape), dtype=np.float64)
    dst, src = [], []
    for o, n in zip(offset, u.shape):
        if abs(o) >= n:
            return out
        dst.append(slice(0, n - o) if o >= 0 else slice(-o, n))
        src.append(slice(o, n) if o >= 0 else slice(0, n + o))
    out[tuple(dst)] = u[tuple(src)]
    return out


def _grid_sum(u, fill, offsets_of) -> np.ndarray:
    u = np.asarray(u, dtype=np.float64)
    if u.ndim not in (2, 3):
        raise ValueError(f"a grid helper takes a 2-D or 3-D grid, got an array of shape {u.shape}")
    if np.ndim(fill) and np.shape(fill) != u.shape:
        raise ValueError(f"fill of shape {np.shape(fill)} differs from the grid's {u.shape}")
    total = np.zeros(u.shape)
    for off in offsets_of(u.ndim):
        total += u if not any(off) else _shifted(u, off, fill)
    return total


def _cross_offsets(rank: int) -> list[tuple[int, ...]]:
    """The point and its 2 x rank axis neighbours."""
    out = [(0,) * rank]
    for a in range(rank):
        for o in (-1, 1):
            out.append(tuple(o if b == a else 0 for b in range(rank)))
    return out


def _box_offsets(rank: int) -> list[tuple[int, ...]]:
    """The 3^rank points of the box around the point (itself included)."""
    import itertools
    return list(itertools.product((-1, 0, 1), repeat=rank))


def cross(u, fill=0.0) -> np.ndarray:
    """Sum of u over each point's star (the point and its axis neighbours), ``fill`` past the edges."""
    return _grid_sum(u, fill, _cross_offsets)


def box(u, fill=0.0) -> np.ndarray:
    """Sum of u over each point's 3 x 3 (x 3) box, ``fill`` past the edges."""
    return _grid_sum(u, fill, _box_offsets)


_GRID_CALLS: dict[str, Callable[..., Any]] = {"cross": cross, "box": box}

KINDS: dict[str, dict[str, Any]] = {
    "reference": {"binops": (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult, ast.Pow),
                  "calls": True, "tuple": True},
    "grid_reference": {"binops": (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult, ast.Pow),
                       "calls": True, "tuple": True, "grid": True},
    "flops": {"binops": (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv), "calls": False, "tuple": False},
}


class ExprError(KfuseError, ValueError):
    """An expression the library format does not allow (the message names the construct)."""


def _describe(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:       # noqa: BLE001 - only for the message
        text = type(node).__name__
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(node).__name__} `{text}`"


def check(text: str, names: frozenset[str] | set[str], kind: str) -> ast.expr:
    """The checked tree of ``text``; raises ExprError naming the offending construct."""
    if kind not in KINDS:
        raise ValueError(kind)
    if len(text) > MAX_LENGTH:
        raise ExprError(f"longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"syntax: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise ExprError(f"syntax: {e.__class__.__name__}") from None
    rules = KINDS[kind]

    def visit(node: ast.AST, depth: int, top: bool = False) -> None:
        if depth > MAX_DEPTH:
            raise ExprError(f"nested deeper than {MAX_DEPTH}")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)) or \
                    (kind == "flops" and not isinstance(node.value, int)):
                raise ExprError(f"literal {node.value!r} is not allowed (only numbers"
                                f"{'' if kind == 'reference' else ', integers'})")
            return
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ExprError(f"uses {node.id}, which is not "
                                f"{'an input parameter' if kind == 'reference' else 'a parameter'}")
            return
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, rules["binops"]):
                raise ExprError(f"operator {type(node.op).__name__} in {_describe(node)} is not allowed")
            if isinstance(node.op, ast.Pow):
                e = node.right
                if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):     # x ** -1
                    e = e.operand
                if not (isinstance(e, ast.Constant) and isinstance(e.value, (int, float))
                        and not isinstance(e.value, bool) and abs(e.value) <= MAX_POWER):
                    raise ExprError(f"{_describe(node)}: ** takes a literal exponent of at most {MAX_POWER}")
            if isinstance(node.op, (ast.Div, ast.FloorDiv)) and isinstance(node.right, ast.Constant) \
                    and node.right.value == 0:
                raise ExprError(f"{_describe(node)} divides by zero")
            visit(node.left, depth + 1)
            visit(node.right, depth + 1)
            return
        if isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                raise ExprError(f"operator {type(node.op).__name__} in {_describe(node)} is not allowed")
            visit(node.operand, depth + 1)
            return
        if isinstance(node, ast.Tuple) and top and rules["tuple"] and isinstance(node.ctx, ast.Load):
            if len(node.elts) < 2:
                raise ExprError(f"{_describe(node)}: a tuple of outputs needs two or more")
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    raise ExprError(f"{_describe(e)} is not allowed")
                visit(e, depth + 1)
            return
        if isinstance(node, ast.Attribute) and rules["calls"] and node.attr == "T":
            if isinstance(node.value, ast.Name) and node.value.id == "np":
                raise ExprError(f"{_describe(node)} is not allowed")
            visit(node.value, depth + 1)
            return
        if isinstance(node, ast.Call) and rules["calls"]:
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "np" \
                    and f.attr in _NP_CALLS and "np" not in names:
                nargs = _NARGS.get(f.attr, 1)
                allowed_kw = {"axis"} if f.attr == "sum" else set()
                if f.attr == "triu" and len(node.args) == 2:
                    k = node.args[1]
                    if not (isinstance(k, ast.Constant) and isinstance(k.value, int) and not isinstance(k.value, bool)
                            and abs(k.value) <= MAX_DIAGONAL):
                        raise ExprError(f"{_describe(node)}: the diagonal is a literal int of at most "
                                        f"{MAX_DIAGONAL} in magnitude")
                    nargs = 2
            elif isinstance(f, ast.Name) and f.id == "abs" and "abs" not in names:
                nargs, allowed_kw = 1, set()
            elif isinstance(f, ast.Name) and f.id in _GRID_CALLS and rules.get("grid") and f.id not in names:
                nargs, allowed_kw = (1 if len(node.args) == 1 else 2), set()
            else:
                raise ExprError(f"call {_describe(f)} is not allowed (only np.dot, np.outer, np.sum, "
                                "np.abs, np.triu, abs, the elementwise np.exp, np.log, np.sqrt, np.tanh, np.sin, "
                                "np.cos, np.maximum, np.minimum, np.where, np.atleast_2d and np.max, np.min"
                                + (", cross, box)" if rules.get("grid") else "; a stencil's "
                                                          "reference also cross and box)"))
            if len(node.args) != nargs or any(isinstance(a, ast.Starred) for a in node.args):
                raise ExprError(f"{_describe(node)} takes {nargs} argument(s)")
            for kw in node.keywords:
                if kw.arg not in allowed_kw or not (isinstance(kw.value, ast.Constant) and isinstance(
                        kw.value.value, int) and not isinstance(kw.value.value, bool)):
                    raise ExprError(f"keyword {kw.arg}= in {_describe(node)} is not allowed"
                                    + (" (only axis=<int>)" if allowed_kw else ""))
                if not -2 <= kw.value.value <= 1:       # operands are vectors and matrices
                    raise ExprError(f"{_describe(node)}: axis is 0 or 1 (or -1, -2)")
            for a in node.args:
                visit(a, depth + 1)
            return
        if isinstance(node, ast.Compare) and kind != "flops":
            if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
                raise ExprError(f"{_describe(node)}: one comparison < <= > >= == != at a time")
            visit(node.left, depth + 1)
            visit(node.comparators[0], depth + 1)
            return
        if isinstance(node, ast.Attribute):
            raise ExprError(f"attribute .{node.attr} in {_describe(node)} is not allowed"
                            + (" (only .T)" if rules["calls"] else ""))
        raise ExprError(f"{_describe(node)} is not allowed")

    try:
        visit(tree.body, 0, top=True)
    except RecursionError:
        raise ExprError(f"nested deeper than {MAX_DEPTH}") from None
    return tree.body


@functools.lru_cache(maxsize=1024)
def _checked(text: str, names: frozenset[str], kind: str) -> ast.expr:
    return check(text, names, kind)


def evaluate(text: str, scope: dict, kind: str):
    """Value of a library expression with the names in ``scope`` bound (checked again first).
    Total: what cannot be computed (a division by zero, an overflow, an axis an operand lacks,
    shapes that do not fit) raises :class:`ExprError` naming the expression, and ``flops`` must
    come out a non-negative integer."""
    tree = _checked(text, frozenset(scope), kind)
    try:
        value = _eval(tree, scope)
    except (ArithmeticError, ValueError, IndexError, TypeError) as e:
        raise ExprError(f"{kind} {text[:80]!r} cannot be evaluated: {type(e).__name__}: "
                        f"{str(e)[:200]}") from None
    if kind == "flops" and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
        raise ExprError(f"flops {text[:80]!r} came out {value!r:.40}, not a count (a non-negative integer)")
    # a real value only: a complex one (a negative number ** 0.5) would be cast to real with a warning
    if any(np.iscomplexobj(v) for v in (value if isinstance(value, tuple) else (value,))):
        raise ExprError(f"{kind} {text[:80]!r} came out complex (a negative number to a fractional power?): "
                        "only real values are taken")
    return value


def _eval(node: ast.expr, scope: dict):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return scope[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, scope), _eval(node.right, scope)
        if isinstance(node.op, ast.Pow) and isinstance(left, int):
            left = float(left)      # 10**8 nested 20 deep: a float overflows, an int would grow for ever
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, scope))
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, scope) for e in node.elts)
    if isinstance(node, ast.Compare):
        return _COMPARE[type(node.ops[0])](_eval(node.left, scope), _eval(node.comparators[0], scope))
    if isinstance(node, ast.Attribute):      # .T, the only attribute check() lets through
        return _eval(node.value, scope).T
    if isinstance(node, ast.Call):
        f = node.func
        fn = _NP_CALLS[f.attr] if isinstance(f, ast.Attribute) else _GRID_CALLS.get(getattr(f, "id", ""), abs)
        kw: dict[str, Any] = {}
        for k in node.keywords:
            if not isinstance(k.value, ast.Constant):
                raise AssertionError(f"unchecked keyword {k.arg}")
            kw[str(k.arg)] = k.value.value
        return fn(*(_eval(a, scope) for a in node.args), **kw)
    raise AssertionError(f"unchecked node {type(node).__name__}")
