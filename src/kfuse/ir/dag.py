"""Walks of expression DAGs (scalar arithmetic shares operands): each distinct node once, by
identity, with an explicit stack, so that ``b = a * a; c = b * b; ...`` stays linear and deep
expressions never reach Python's recursion limit."""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

N = TypeVar("N")


def post_order(roots: Iterable[N], children: Callable[[N], Iterable[N]]) -> list[N]:
    """The distinct nodes reachable from ``roots`` (by identity), operands before the nodes that
    use them, leaves in order of first appearance (left to right, root by root)."""
    order: list[N] = []
    seen: set[int] = set()
    stack: list[tuple[N, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        node, ready = stack.pop()
        if ready:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(list(children(node))) if id(c) not in seen)
    return order
