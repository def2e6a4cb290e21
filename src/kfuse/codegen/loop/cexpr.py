"""The C text of scalar expressions (``ir/loop.py``'s tuples) in the loop's kernels: the control
module's kf_scalars and while loop kernels, and the persistent and merged kernels' tails and
conditions.

An operation an expression reaches more than once (the same tuple: ``a * a`` repeated, operands
the returned arithmetic shares) is computed once, into a named constant: the text grows with the
distinct operations, not with the paths to them (22 squarings written as a tree would be 84 MB
of C)."""
from __future__ import annotations

import math

from ...errors import CompileError
from ...ir.dag import post_order
from ...ir.loop import LEAVES, operands

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


def c_leaf(node: tuple) -> str:
    """The C text of a leaf: a pointer read, a value, an entry of the numbers array, a literal."""
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


def c_op(op: str, a: list[str]) -> str:
    """The C text of operation ``op`` over its operands' texts ``a``."""
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
    ``cst[k]`` and literals: an operation reached more than once (the same tuple: the
    expression builders of ``scalars.py`` and the loops' traced conditions keep the operands
    their sources share) is computed once, into ``const real t<n>``, declared before the texts.
    Each distinct node is visited once, with an explicit stack: ``b = a * a; c = b * b; ...``
    stays linear, where written out in full it would double with every step.  A shared
    comparison is a ``const bool``, arithmetic a ``const real`` (the types the operations have
    written in place)."""
    order = post_order(exprs, operands)          # distinct nodes, operands first
    uses: dict[int, int] = {}
    for e in exprs:                     # a result is a use too: one result the operand of another
        uses[id(e)] = uses.get(id(e), 0) + 1
    for node in order:
        if node[0] not in LEAVES:
            for a in node[1:]:
                uses[id(a)] = uses.get(id(a), 0) + 1
    decls: list[str] = []
    text: dict[int, str] = {}
    for node in order:
        if node[0] in LEAVES:
            text[id(node)] = c_leaf(node)
            continue
        t = c_op(node[0], [text[id(a)] for a in node[1:]])
        if uses.get(id(node), 0) > 1:     # a comparison stays a bool, as it is written in place
            decls.append(f"const {'bool' if node[0] in _BOOL else 'real'} t{len(decls)} = {t};")
            t = f"t{len(decls) - 1}"
        text[id(node)] = t
    return decls, [text[id(e)] for e in exprs]


__all__ = ["c_expr", "c_leaf", "c_op", "c_shared"]
