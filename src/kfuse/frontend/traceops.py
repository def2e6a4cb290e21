"""Python front end: the operators of traced values as nodes (``frontend/trace.py``'s proxies call
these): linear combinations, products and dot products map onto the BLAS; what does not
(entrywise products, a vector plus a number, broadcasting) is elementwise (``frontend/ewtrace.py``)."""
from __future__ import annotations

from ..errors import TraceError
from . import ewtrace
from .sites import user_site
from .tracenode import RANK_WORDS, Node, lit


def mismatch(op: str, a: Node, b: Node) -> TraceError:
    return TraceError(f"{RANK_WORDS[a.rank]} {op} {RANK_WORDS[b.rank]} maps onto no library function",
                      user_site())


def check_len(what: str, n: int, m: int) -> None:
    if n != m:
        raise TraceError(f"{what}: sizes {n} and {m} differ", user_site())


def dense(n: Node, what: str) -> None:
    """Refuse a CSR matrix where only dense values go (it is read by spmv, A @ x, only)."""
    if n.rank == 3:
        raise TraceError(f"{what} of a CSR matrix maps onto no library function (a CSR matrix is read by "
                         "A @ x, spmv, only)", user_site())


def _elementwise(a: Node, b: Node) -> bool:
    """An operation of these operands that no BLAS call makes: ranks differ (a vector plus a
    number, a vector beside a matrix), a broadcast vector takes part, or matrix shapes differ
    (``2.0 * u[:, None] + A``: an expression of a broadcast vector beside a matrix)."""
    return a.rank != b.rank or a.kind == "bcast" or b.kind == "bcast" or (a.rank == 2 and a.shape != b.shape)


def linear(op: str, a: Node, b: Node) -> Node:
    dense(a, op)
    dense(b, op)
    if a.kind == "T" or b.kind == "T":
        raise TraceError("A.T is only used as the left operand of @ (A.T @ x is gemtv)", user_site())
    if _elementwise(a, b) or (a.boolean and b.boolean):     # bools: their own arithmetic (ewtrace)
        return ewtrace.ew(op, [a, b])
    if a.rank == 0:
        return Node("bin", 0, (a, b), op)
    if a.shape != b.shape:
        raise TraceError(f"{op}: shapes {a.shape} and {b.shape} differ", user_site())
    if op == "-":
        b = Node("scale", b.rank, (lit(-1.0), b), shape=b.shape)
    return Node("add", a.rank, (a, b), shape=a.shape)


def scale(s: Node, x: Node, op: str) -> Node:
    dense(x, op)
    if x.kind == "T":
        raise TraceError("A.T is only used as the left operand of @ (A.T @ x is gemtv)", user_site())
    if x.stretch:               # -u[:, None]: a broadcast vector scaled is elementwise, of its shape
        return ewtrace.ew("/", [x, s]) if op == "/" else ewtrace.ew("*", [s, x])
    if op == "/":
        s = Node("bin", 0, (lit(1.0), s), "/")
    return Node("scale", x.rank, (s, x), shape=x.shape)


def mul(a: Node, b: Node) -> Node:
    if (a.rank and b.rank) or a.kind == "bcast" or b.kind == "bcast":
        return ewtrace.ew("*", [a, b])          # entrywise (x * y, A * d[:, None])
    if not a.rank and not b.rank:
        return Node("bin", 0, (a, b), "*")
    return scale(a, b, "*") if not a.rank else scale(b, a, "*")


def div(a: Node, b: Node) -> Node:
    if b.rank or a.kind == "bcast":
        return ewtrace.ew("/", [a, b])          # entrywise (x / d), or a number over a vector
    return Node("bin", 0, (a, b), "/") if not a.rank else scale(b, a, "/")


def matmul(a: Node, b: Node) -> Node:
    dense(b, "x @ A")
    if a.kind == "bcast" and b.kind == "bcast" and a.data == "row" and b.data == "col":
        u, v = a.args[0], b.args[0]         # u[:, None] @ v[None, :]: PolyBench's outer product
        return Node("outer", 2, (u, v), shape=(u.shape[0], v.shape[0]))
    if a.kind == "bcast" or b.kind == "bcast":
        raise TraceError("@ of a broadcast vector: u[:, None] @ v[None, :] is an outer product; otherwise use "
                         "it elementwise", user_site())
    if a.rank == 2 or b.rank == 2:
        if all((n.args[0] if n.kind == "T" else n).boolean for n in (a, b)):
            raise TraceError("@ of comparisons' results (arrays of bools) is NumPy's logical product; make them "
                             "numbers first ((A > 0) * 1.0)", user_site())
    if a.kind == "T" and b.rank == 1:
        A = a.args[0]
        check_len("A.T @ x: the rows of A and the length of x", A.shape[0], b.shape[0])
        return Node("matvec", 1, (A, b), "T", shape=(A.shape[1],))
    if a.rank == 2 and b.rank == 1:
        check_len("A @ x: the columns of A and the length of x", a.shape[1], b.shape[0])
        return Node("matvec", 1, (a, b), "N", shape=(a.shape[0],))
    if a.rank == 1 and b.rank == 2 and b.kind != "T":
        check_len("x @ A: the length of x and the rows of A", a.shape[0], b.shape[0])
        return Node("matvec", 1, (b, a), "T", shape=(b.shape[1],))
    if a.rank == 1 and b.kind == "T":       # x @ A.T is A @ x
        B = b.args[0]
        check_len("x @ A.T: the length of x and the columns of A", a.shape[0], B.shape[1])
        return Node("matvec", 1, (B, a), "N", shape=(B.shape[0],))
    if a.rank == 1 and b.rank == 1:
        check_len("x @ y: the lengths of x and y", a.shape[0], b.shape[0])
        if a.boolean and b.boolean:     # NumPy's dot of bools is a bool: whether any pair is true
            return ewtrace.reduce("max", ewtrace.ew("*", [a, b]))
        return Node("dot", 0, (a, b))
    raise mismatch("@", a, b)
