"""Dependency graph of a program: calls as nodes, data dependencies as edges.

Calls that read the same input value are recorded too: they are horizontal fusion
opportunities (BiCGK's two products both read A).

Besides the edge table (``edge_values``) the graph keeps per-call indexes of it (``in_edges``:
the producers each call reads from; ``shared_of``: the shared values each call reads) so that
rules about one fusion look only at its own calls' edges, not at the whole script's: the planner
checks thousands of candidate fusions of a long script, and a scan of every edge per candidate
made planning quadratic in the script's length (issue 44, finding 5).
"""
from __future__ import annotations

import heapq
from typing import Any

from ..errors import ScriptError
from .program import Program, ScalarArg, Value


class DependencyGraph:
    def __init__(self, program: Program):
        self.program = program
        n = len(program.calls)
        self.preds: list[set[int]] = [set() for _ in range(n)]
        self.succs: list[set[int]] = [set() for _ in range(n)]
        self.edge_values: dict[tuple[int, int], list[Value]] = {}
        # per consumer, its producers in the order their edges entered ``edge_values``
        self.in_edges: list[list[int]] = [[] for _ in range(n)]
        producer: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        for c in program.calls:
            for v in (u for a in c.args for u in (a.values() if isinstance(a, ScalarArg) else (a,))):
                readers.setdefault(v.id, []).append(c.index)
                if v.id in producer:
                    p = producer[v.id]
                    self.preds[c.index].add(p)
                    self.succs[p].add(c.index)
                    if (p, c.index) not in self.edge_values:
                        self.in_edges[c.index].append(p)
                    self.edge_values.setdefault((p, c.index), []).append(v)
            for v in c.outputs:
                producer[v.id] = c.index
        self.producer = producer
        # results of pure functions of the program kept for the planner's many questions, each
        # under keys of its own (fusion/legality.py: each edge's verdict, each call's reads;
        # fusion/shape.py: each call's part of a fusion shape, the readers of its results)
        self.memo: dict[tuple, Any] = {}
        self.returned = frozenset(v.id for v in program.outputs)    # the values the script returns
        self._topo: tuple[int, ...] | None = None
        self._desc: list[int] | None = None
        self._anc: list[int] | None = None
        self.shared_inputs: dict[int, list[int]] = {v: cs for v, cs in readers.items() if len(cs) > 1}
        # per call, the values of ``shared_inputs`` it reads (each once, in first-read order)
        self.shared_of: list[list[int]] = [[] for _ in range(n)]
        for vid, cs in self.shared_inputs.items():
            for reader in dict.fromkeys(cs):
                self.shared_of[reader].append(vid)

    def edges_within(self, calls) -> list[tuple[int, int]]:
        """The edges (producer, consumer) between calls of ``calls``, in the order of
        ``edge_values`` (consumers in script order, each one's producers in argument order):
        the fusion's own edges, found without scanning the script's."""
        return [(p, c) for c in sorted(calls) for p in self.in_edges[c] if p in calls]

    def topological_order(self) -> list[int]:
        """Calls in an order that respects dependencies (script order among ready calls)."""
        if self._topo is not None:
            return list(self._topo)
        indeg = [len(p) for p in self.preds]
        ready = [i for i, d in enumerate(indeg) if d == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for s in self.succs[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(order) != len(indeg):
            raise ScriptError("the calls form a dependency cycle", self.program.file)
        self._topo = tuple(order)
        return order

    def reaches(self, a: int, b: int) -> bool:
        """Is there a path of data dependencies from call a to call b?"""
        return bool((self.descendants[a] >> b) & 1)

    @property
    def descendants(self) -> list[int]:
        """Per call, the calls reachable from it, as a bit set (bit c: call c); computed once."""
        if self._desc is None:
            desc = [0] * len(self.succs)
            for i in reversed(self.topological_order()):
                for s in self.succs[i]:
                    desc[i] |= (1 << s) | desc[s]
            self._desc = desc
        return self._desc

    @property
    def ancestors(self) -> list[int]:
        """Per call, the calls it is reachable from, as a bit set; computed once."""
        if self._anc is None:
            anc = [0] * len(self.preds)
            for i in self.topological_order():
                for p in self.preds[i]:
                    anc[i] |= (1 << p) | anc[p]
            self._anc = anc
        return self._anc

    def dot(self, name: str = "kfuse", clusters=()) -> str:
        """Graphviz text of the graph: calls, the values on each edge, inputs shared (dashed);
        ``clusters`` ((label, call indices) each: a plan's kernels) groups calls in boxes."""
        def q(text: str) -> str:
            return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines = [f"digraph {q(name)} {{", "  node [shape=box];"]
        grouped: set[int] = set()
        for n, (label, calls) in enumerate(clusters):
            lines += [f"  subgraph cluster_{n} {{", f"    label={q(label)};"]
            lines += [f"    c{i} [label={q(self.program.calls[i].text())}];" for i in calls]
            lines.append("  }")
            grouped.update(calls)
        lines += [f"  c{c.index} [label={q(c.text())}];" for c in self.program.calls if c.index not in grouped]
        for (p, c), vs in sorted(self.edge_values.items()):
            lines.append(f"  c{p} -> c{c} [label={q(', '.join(v.name for v in vs))}];")
        for v, cs in sorted(self.shared_inputs.items()):
            shared = self.program.values[v].name
            for a, b in zip(cs, cs[1:]):
                lines.append(f"  c{a} -> c{b} [style=dashed, dir=none, label={q('shares ' + shared)}];")
        lines.append("}")
        return "\n".join(lines)
