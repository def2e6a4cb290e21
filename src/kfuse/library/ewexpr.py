"""Elementwise expressions: the vocabulary of synthesized functions (``library/synth.py``).

An expression is a tree of tuples over a function's inputs:

* ``("in", k)``: input k (a scalar, a vector, a matrix, or a vector broadcast along a matrix's
  rows or columns: its kind is the function's, not the expression's);
* ``("num", value)``: a finite number;
* ``(op, a)`` for op in :data:`UNARY`, ``(op, a, b)`` for op in :data:`BINARY`, and
  ``("where", c, a, b)``.

The same tree is written three ways: as script text (what the script language parses back to
it), as a NumPy reference (``library/expr.py`` checks and evaluates it) and as C (one entry of
each input at a time, in ``real``, through the prelude's ``kf_*`` math).  NumPy's semantics hold
throughout: ``maximum`` and ``minimum`` propagate NaN, comparisons give 0 or 1, ``where`` takes a
non-zero condition (NaN included) as true, division by zero and ``log`` of a negative number give
inf and NaN.
"""
from __future__ import annotations

import math
from typing import Callable

UNARY = ("neg", "abs", "sqrt", "exp", "log", "tanh", "sin", "cos", "sigmoid")
COMPARE = ("<", "<=", ">", ">=", "==", "!=")
ARITH = ("+", "-", "*", "/")
BINARY = ARITH + ("pow", "maximum", "minimum") + COMPARE
FUNCTIONS = UNARY[1:] + ("maximum", "minimum", "where")     # written name(args) in scripts
MAX_POWER = 8           # x ** k for a literal |k| <= 8 (library/expr.py's limit for references)

# precedence for writing infix text: comparisons < + - < * / < unary - < ** < atoms
_PREC = {**{op: 1 for op in COMPARE}, "+": 2, "-": 2, "*": 3, "/": 3, "neg": 4, "pow": 5}


def arity(op: str) -> int:
    """The operands an operation takes: ``where`` 3, a binary operator or function 2, else 1."""
    return 3 if op == "where" else 2 if op in BINARY else 1


def flops(e: tuple) -> int:
    """Operations per entry (each operator and function one)."""
    if e[0] in ("in", "num"):
        return 0
    return 1 + sum(flops(a) for a in e[1:])


def inputs_read(e: tuple) -> set[int]:
    if e[0] == "in":
        return {e[1]}
    if e[0] == "num":
        return set()
    return set().union(*(inputs_read(a) for a in e[1:]))


def _number(x: float) -> str:
    return repr(float(x))


def text(e: tuple, name: Callable[[int], str], np: bool = False, outer: int = 0) -> str:
    """``e`` as script text (``np=False``) or as a NumPy reference (``np=True``); ``name(k)``
    writes input k."""
    op = e[0]
    if op == "in":
        return name(e[1])
    if op == "num":
        t = _number(e[1])
        return f"({t})" if e[1] < 0 and outer >= _PREC["neg"] else t
    if op in ("maximum", "minimum", "where") or (op in UNARY and op != "neg"):
        args = ", ".join(text(a, name, np) for a in e[1:])
        if np and op == "sigmoid":
            return f"(1 / (1 + np.exp(-({args}))))"
        return f"np.{op}({args})" if np else f"{op}({args})"
    prec = _PREC[op]
    if op == "neg":
        t = "-" + text(e[1], name, np, prec)
    elif op == "pow":
        t = f"{text(e[1], name, np, prec + 1)} ** {text(e[2], name, np, prec + 1)}"
    else:
        # left-associative: the right operand of - and / (and of a comparison) binds tighter
        t = f"{text(e[1], name, np, prec)} {op} {text(e[2], name, np, prec + 1)}"
        if np and op in COMPARE:
            return f"(1.0 * ({t}))"         # NumPy's bools as numbers, as C's comparisons give them
    return f"({t})" if prec < outer else t


def c_text(e: tuple, entry: Callable[[int], str]) -> str:
    """``e`` in C over ``real``: ``entry(k)`` is input k's entry (or scalar) at hand."""
    op = e[0]
    if op == "in":
        return entry(e[1])
    if op == "num":
        return f"real({_number(e[1])})"
    args = [c_text(a, entry) for a in e[1:]]
    if op == "neg":
        return f"(-{args[0]})"
    if op in ARITH:
        return f"({args[0]} {op} {args[1]})"
    if op in COMPARE:
        return f"real({args[0]} {op} {args[1]})"
    if op == "where":
        return f"kf_where({args[0]} != real(0), {args[1]}, {args[2]})"
    if op == "pow":
        return _c_pow(args[0], e[2])
    return f"kf_{op}({', '.join(args)})"


def _c_pow(base: str, exponent: tuple) -> str:
    """x ** k: products for small integer k (as NumPy's fast paths), sqrt for 0.5, else pow."""
    if exponent[0] == "num":
        k = exponent[1]
        if k == 0.5:
            return f"kf_sqrt({base})"
        if k == int(k) and abs(k) <= MAX_POWER:
            k = int(k)
            if k == 0:
                return "real(1)"
            prod = "(" + " * ".join([base] * abs(k)) + ")"
            return prod if k > 0 else f"(real(1) / {prod})"
    return f"kf_pow({base}, {c_text(exponent, lambda k: '')})"


def check_power(exponent: tuple) -> str | None:
    """Why ``x ** exponent`` is refused, or None: a literal of at most MAX_POWER in magnitude."""
    if exponent[0] != "num":
        return "the exponent of ** is a number (x ** 2, x ** 0.5), not an array or a computed scalar"
    k = exponent[1]
    if not math.isfinite(k) or abs(k) > MAX_POWER:
        return f"the exponent of ** is at most {MAX_POWER} in magnitude, got {k!r}"
    return None
