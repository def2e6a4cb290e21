"""Dependency graph of a program: calls as nodes, data dependencies as edges.

Calls that read the same input value are recorded too: they are horizontal fusion
opportunities (BiCGK's two products both read A).
"""
from __future__ import annotations

from ..errors import ScriptError
from .program import Program, ScalarArg, Value


class DependencyGraph:
    def __init__(self, program: Program):
        self.program = program
        n = len(program.calls)
        self.preds: list[set[int]] = [set() for _ in range(n)]
        self.succs: list[set[int]] = [set() for _ in range(n)]
        self.edge_values: dict[tuple[int, int], list[Value]] = {}
        producer: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        for c in program.calls:
            for a in c.args:
                v = a.value if isinstance(a, ScalarArg) else a
                if v is None:
                    continue
                readers.setdefault(v.id, []).append(c.index)
                if v.id in producer:
                    p = producer[v.id]
                    self.preds[c.index].add(p)
                    self.succs[p].add(c.index)
                    self.edge_values.setdefault((p, c.index), []).append(v)
            for v in c.outputs:
                producer[v.id] = c.index
        self.producer = producer
        self.shared_inputs: dict[int, list[int]] = {v: cs for v, cs in readers.items() if len(cs) > 1}

    def topological_order(self) -> list[int]:
        """Calls in an order that respects dependencies (script order among ready calls)."""
        indeg = [len(p) for p in self.preds]
        ready = sorted(i for i, d in enumerate(indeg) if d == 0)
        order = []
        while ready:
            i = ready.pop(0)
            order.append(i)
            for s in sorted(self.succs[i]):
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append(s)
            ready.sort()
        if len(order) != len(indeg):
            raise ScriptError("the calls form a dependency cycle", self.program.file)
        return order

    def reaches(self, a: int, b: int) -> bool:
        """Is there a path of data dependencies from call a to call b?"""
        stack, seen = [a], set()
        while stack:
            x = stack.pop()
            if x == b:
                return True
            for s in self.succs[x]:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    def dot(self) -> str:
        """Graphviz text of the graph (calls and the values on each edge)."""
        lines = ["digraph kfuse {"]
        for c in self.program.calls:
            lines.append(f'  c{c.index} [label="{c.text()}"];')
        for (p, c), vs in sorted(self.edge_values.items()):
            lines.append(f'  c{p} -> c{c} [label="{", ".join(v.name for v in vs)}"];')
        for v, cs in sorted(self.shared_inputs.items()):
            name = self.program.values[v].name
            for a, b in zip(cs, cs[1:]):
                lines.append(f'  c{a} -> c{b} [style=dashed, dir=none, label="shares {name}"];')
        lines.append("}")
        return "\n".join(lines)
