"""The partitioners: which calls share a kernel.  A partition covers every call once with blocks
(fusions that have ranked implementations, and single calls) whose kernel graph is acyclic.

Exhaustive search (``exhaustive_partitions``) lists every such partition; bounded search of a large
script (``greedy_partitions``) merges the most saving fusion first, and ``refine_chosen`` then
searches the chosen partition's fused kernels further."""
from __future__ import annotations

import heapq
from typing import Callable, Collection, Iterable, Mapping, Sequence

from ..ir.graph import DependencyGraph
from ..library.schema import Library
from .blocks import BlockGraph
from .rank import Ranked
from .space import REFINE_BUILDS, REFINE_TOTAL, Space, refine

Partition = tuple[frozenset[int], ...]


def kernel_order(graph: DependencyGraph, blocks: Sequence[frozenset[int]]) -> list[frozenset[int]] | None:
    """The blocks (a partition of the calls) in launch order: a topological order of the kernel
    graph, the ready kernel with the smallest call first; None when it has a cycle.  Linear in the
    calls and edges (but for the heap of ready kernels)."""
    where = {c: n for n, b in enumerate(blocks) for c in b}
    succ: list[set[int]] = [set() for _ in blocks]
    succs = graph.succs
    for p, n in where.items():
        for c in succs[p]:
            m = where[c]
            if m != n:
                succ[n].add(m)
    indeg = [0] * len(blocks)
    for targets in succ:
        for m in targets:
            indeg[m] += 1
    ready = [(min(blocks[n]), n) for n in range(len(blocks)) if indeg[n] == 0]
    heapq.heapify(ready)
    result = []
    while ready:
        _, n = heapq.heappop(ready)
        result.append(blocks[n])
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                heapq.heappush(ready, (min(blocks[m]), m))
    return result if len(result) == len(blocks) else None


def ordered(graph: DependencyGraph, blocks: Iterable[frozenset[int]]) -> list[frozenset[int]]:
    """``kernel_order`` of blocks known to form an acyclic partition."""
    order = kernel_order(graph, list(blocks))
    assert order is not None, "a partition of the plan space is acyclic"
    return order


def exhaustive_partitions(graph: DependencyGraph, ranked: Collection[frozenset[int]]) -> list[Partition]:
    """Every acyclic partition of the calls into blocks of ``ranked`` (the fusions and calls with
    an implementation that fits), calls taken in a topological order."""
    order = graph.topological_order()
    out: list[Partition] = []
    # a block grows one call at a time, so the blocks on the way to a fusion need not be fusions
    # themselves (a vector call between two matrix calls is legal only with both: legality.py)
    on_way = {frozenset(order_part) for f in ranked if len(f) > 2
              for order_part in _prefixes([c for c in order if c in f])}

    def rec(k: int, blocks: list[frozenset[int]]) -> None:
        if k == len(order):
            if all(b in ranked for b in blocks) and kernel_order(graph, blocks) is not None:
                out.append(tuple(blocks))
            return
        c = order[k]
        for n, b in enumerate(blocks):
            joined = b | {c}
            if joined in ranked or joined in on_way:
                rec(k + 1, blocks[:n] + [joined] + blocks[n + 1:])
        rec(k + 1, blocks + [frozenset({c})])

    rec(0, [])
    return out


def _prefixes(calls: list[int]):
    """The sets of calls a block holds on its way to ``calls`` (in topological order): each subset
    (a block takes a call of the order or leaves it to another block)."""
    from itertools import combinations
    for size in range(2, len(calls)):
        yield from combinations(calls, size)


def greedy_partitions(graph: DependencyGraph, calls: int, ranked: Mapping[frozenset[int], Ranked]) -> list[Partition]:
    """Bounded search: from one kernel per call (``calls`` of them), repeatedly merge the blocks of
    the fusion that saves the most predicted time (a fusion made of whole blocks, keeping the kernel
    graph acyclic), until none saves; that partition, and one kernel per call.

    The options are kept in a heap keyed by (-saving, calls) and offered again only when a
    merge changes the blocks of one of their calls (a fusion's saving depends on nothing else),
    so each merge costs the fusions it touches, not all of them; whether a merge keeps the
    kernel graph acyclic is checked on the blocks between the merged ones (``BlockGraph``).
    An option refused for a cycle is dropped until its blocks change: merging other blocks
    keeps every path, so it stays refused.  The merges are those of scanning every option
    each round, best first (the search before issue 44, finding 5)."""
    best = {c: r[0][0] for c, r in ranked.items()}
    where = {i: frozenset({i}) for i in range(calls)}
    fusions = [c for c in ranked if len(c) > 1]
    touching: dict[int, list[frozenset[int]]] = {}       # call -> the fusions holding it
    for c in fusions:
        for i in c:
            touching.setdefault(i, []).append(c)
    dag = BlockGraph(graph)
    heap: list[tuple[float, list[int], int]] = []
    current: dict[frozenset[int], tuple[float, list[int]]] = {}     # fusion -> its live key
    number = {c: k for k, c in enumerate(fusions)}

    def offer(c: frozenset[int]) -> None:
        current.pop(c, None)
        parts = {where[i] for i in c}
        if len(parts) < 2 or any(not b <= c for b in parts):
            return
        saving = sum(best[b] for b in parts) - best[c]
        if saving > 0:
            key = (-saving, sorted(c))
            current[c] = key
            heapq.heappush(heap, (key[0], key[1], number[c]))

    for c in fusions:
        offer(c)
    while heap:
        neg, members, k = heapq.heappop(heap)
        c = fusions[k]
        if current.get(c) != (neg, members):
            continue            # stale: its blocks changed since
        del current[c]
        if dag.merge(c) is None:
            continue            # a cycle: refused while its blocks stay as they are
        for i in c:
            where[i] = c
        for f in dict.fromkeys(f for i in c for f in touching[i]):
            offer(f)
    order = graph.topological_order()
    singles = tuple(frozenset({i}) for i in order)
    chosen = tuple(ordered(graph, set(where.values())))
    return [chosen] + ([singles] if set(chosen) != set(singles) else [])


def refine_chosen(space: Space, lib: Library, chosen: Partition, score: Callable, spans: tuple[int, ...],
                  rank: Callable[[list], Ranked]) -> dict[frozenset[int], Ranked]:
    """Bounded search: the chosen partition's fused kernels searched further (fusion/space.py
    ``refine``, which extends ``space``) and ranked again (``rank``): fusion -> its new ranking."""
    fused = [calls for calls in chosen if len(calls) > 1]
    limit = min(REFINE_BUILDS, REFINE_TOTAL // max(1, len(fused)))
    out = {}
    for calls in fused:
        refine(space, lib, calls, score, spans, limit)
        out[calls] = rank(space.impls[calls])
    return out


def count_plans(partitions: Sequence[Partition], ranked: Mapping[frozenset[int], Ranked]) -> int:
    """Plans the partitions hold: per partition, the product of its blocks' implementations."""
    total = 0
    for blocks in partitions:
        n = 1
        for b in blocks:
            n *= len(ranked[b])
        total += n
    return total
