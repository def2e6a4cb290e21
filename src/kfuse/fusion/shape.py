"""What a fusion's kernels depend on, the calls' and values' names left out (``fusion_shape``:
fusions of one shape share their implementations, ``space.implementations``), and the values a
fusion's kernel must store (``stores_of``).  Per-call parts are made once per program and kept in
the dependency graph's memo: a long script's planner asks for thousands of fusions."""
from __future__ import annotations

from ..ir.graph import DependencyGraph
from ..ir.program import Program, ScalarArg


def stores_of(program: Program, graph: DependencyGraph, calls: frozenset[int]) -> frozenset[int]:
    """Values a kernel running these calls must write: returned, or read by a call outside."""
    returned = graph.returned
    out = set()
    for i in calls:
        for vid, readers in _readers_of(program, graph, i):
            if vid in returned or any(c not in calls for c in readers):
                out.add(vid)
    return frozenset(out)


def _readers_of(program: Program, graph: DependencyGraph, i: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Per output of call i, (its value id, the calls reading it); made once per call (``graph.memo``)."""
    key = ("readers", i)
    got = graph.memo.get(key)
    if got is None:
        got = graph.memo[key] = tuple(
            (v.id, tuple(c for c in graph.succs[i] if v in graph.edge_values[(i, c)]))
            for v in program.calls[i].outputs)
    return got


def fusion_shape(program: Program, graph: DependencyGraph, calls: frozenset[int], stores: frozenset[int]) -> tuple:
    """What a kernel's layout and predicted time depend on, with the calls' and values' names left
    out: per call (in script order) its function, its arguments and results (each value's type,
    dimensions and whether an input; scalar arguments by their operation), its instance axes and
    the calls of the fusion it depends on; the values of the calls numbered by first appearance;
    and the values the kernel stores.  Fusions of one shape (a wide script's repeated pairs) have
    the same implementations, laid out once (``Space.shapes``).  A call's part is named by a
    number (the same for calls of the same part, ``_call_shape``): the shape is hashed in few steps."""
    idx = sorted(calls)
    pos = {c: k for k, c in enumerate(idx)}
    num: dict[int, int] = {}
    fixed: list[tuple] = []
    numbers: list[int] = []
    for c in idx:
        part, vids = _call_shape(program, graph, c)
        fixed.append((part, tuple(sorted(pos[p] for p in graph.preds[c] if p in pos))))
        numbers.extend(num.setdefault(v, len(num)) for v in vids)
    return tuple(fixed), tuple(numbers), tuple(sorted(num[v] for v in stores if v in num))


def _call_shape(program: Program, graph: DependencyGraph, c: int) -> tuple[int, tuple[int, ...]]:
    """What ``fusion_shape`` reads of call c: (its function, arguments -- each value's type,
    dimensions and whether an input, or a scalar argument's operation and such values --, results
    and instance axes; the ids of the values those name, in that order, for the fusion to number);
    made once per call (``graph.memo``), the part named by a number (one per distinct part)."""
    key = ("shape", c)
    got = graph.memo.get(key)
    if got is None:
        vids: list[int] = []

        def desc(v) -> tuple:
            vids.append(v.id)
            return (v.type, tuple(program.dim_of.get(d, d) for d in v.dims), v.is_input)
        call = program.calls[c]
        args = tuple(("s", a.op, tuple(desc(v) for v in a.values())) if isinstance(a, ScalarArg) else desc(a)
                     for a in call.args)
        part = (id(call.function), args, tuple(desc(v) for v in call.outputs), call.axes)
        numbers = graph.memo.setdefault(("shape parts",), {})
        got = graph.memo[key] = (numbers.setdefault(part, len(numbers)), tuple(vids))
    return got
