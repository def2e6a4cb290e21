"""The kernel graph of a partition that grows by merges: blocks of calls as nodes, an edge where a
call of one block feeds a call of another; kept with a topological order updated at each merge.

The bounded search (``partition.greedy_partitions``) merges blocks one fusion at a time and
must refuse a merge that would make the kernel graph cyclic (a path leaving the merged blocks
and coming back).  Checking that by ordering the whole partition again costs time linear in the
script per candidate, quadratic over a long script (issue 44, finding 5).  Here the check and
the update look only at the blocks between the merged ones in the current order, as in the
dynamic topological sort of Pearce and Kelly (JEA 2007): a path from one merged block to
another passes only blocks ordered between them.
"""
from __future__ import annotations

from ..ir.graph import DependencyGraph


class BlockGraph:
    """Blocks of calls (initially one per call) with the kernel graph between them and a
    topological order of it (``pos``: block -> position; positions are unique integers, gaps
    allowed).  Blocks are named by an integer id; ``block_of[call]`` is the call's block."""

    def __init__(self, graph: DependencyGraph):
        n = len(graph.succs)
        self.block_of = list(range(n))
        self.succ: dict[int, set[int]] = {i: set(graph.succs[i]) for i in range(n)}
        self.pred: dict[int, set[int]] = {i: set(graph.preds[i]) for i in range(n)}
        self.pos: dict[int, int] = {c: k for k, c in enumerate(graph.topological_order())}
        self._next = n

    def merge(self, calls) -> int | None:
        """Merge the blocks of ``calls`` (whole blocks: every call of each) into one new block and
        return its id, or return None (and change nothing) when the kernel graph would then have
        a cycle."""
        blocks = {self.block_of[c] for c in calls}
        lo = min(self.pos[b] for b in blocks)
        hi = max(self.pos[b] for b in blocks)
        # blocks reachable from the merged ones through others, ordered before the last of them:
        # reaching a merged block is a cycle; blocks ordered after the last one cannot lead back
        forward = self._search(blocks, self.succ, lambda p: p < hi)
        if forward is None:
            return None
        # blocks leading to the merged ones, ordered after the first of them
        backward = self._search(blocks, self.pred, lambda p: p > lo)
        assert backward is not None, "no cycle forward, none backward"
        new = self._next
        self._next += 1
        succ = set().union(*(self.succ.pop(b) for b in blocks)) - blocks
        pred = set().union(*(self.pred.pop(b) for b in blocks)) - blocks
        for s in succ:
            self.pred[s] -= blocks
            self.pred[s].add(new)
        for p in pred:
            self.succ[p] -= blocks
            self.succ[p].add(new)
        self.succ[new], self.pred[new] = succ, pred
        for c in calls:
            self.block_of[c] = new
        # the positions of the blocks moved, given out again: those leading to the merged block
        # first, then it, then those it leads to (each group in its old order).  Every edge
        # keeps pointing forward (Pearce and Kelly's reordering, with the merged blocks' slots)
        slots = sorted(self.pos[b] for b in (*backward, *blocks, *forward))
        moved = sorted(backward, key=self.pos.__getitem__) + [new] + sorted(forward, key=self.pos.__getitem__)
        for b in blocks:
            del self.pos[b]
        for b, p in zip(moved, slots[:len(backward) + 1] + slots[len(slots) - len(forward):]):
            self.pos[b] = p
        return new

    def _search(self, blocks: set[int], edges: dict[int, set[int]], within) -> set[int] | None:
        """Blocks other than ``blocks`` reached from them along ``edges`` through positions
        ``within`` allows; None when such a path comes back to one of ``blocks``."""
        seen: set[int] = set()
        todo = [x for b in blocks for x in edges[b] if x not in blocks and within(self.pos[x])]
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            for y in edges[x]:
                if y in blocks:
                    return None
                if y not in seen and within(self.pos[y]):
                    todo.append(y)
        return seen
