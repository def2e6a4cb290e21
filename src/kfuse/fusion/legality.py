"""Legality of a fusion: each rule returns None when it allows the set of calls, else a reason.

Rules look only at the program (what the calls compute and exchange); whether a particular
implementation fits on chip is decided when its kernel is built (``FusionError``).
"""
from __future__ import annotations

from itertools import combinations

from ..ir.graph import DependencyGraph
from ..ir.program import Call, Program, ScalarArg, Value


def _calls(program: Program, fusion: frozenset[int]) -> list[Call]:
    return [program.calls[i] for i in sorted(fusion)]


def same_nesting(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> str | None:
    """Calls of different nesting depth are not fused (the shallower one would be repeated)."""
    depths = {c.function.nesting for c in _calls(program, fusion)}
    if len(depths) > 1:
        return f"nesting depths {sorted(depths)} differ"
    return None


def same_instances(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> str | None:
    """Producer and consumer instances must meet in one thread block: the calls must walk the same
    instance space (same dimensions along every axis)."""
    calls = _calls(program, fusion)
    first = calls[0]
    for c in calls[1:]:
        if c.axes != first.axes:
            names = lambda call: "x".join(program.dims[d].name for d in call.axes)  # noqa: E731
            return f"{c.text()} walks {names(c)} instances, {first.text()} walks {names(first)}"
    return None


def exchanges_on_chip(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> str | None:
    """Every value passed between fused calls must stay in the instance that made it: the consumer
    reads the same element the producer wrote; a reduction's result is never used in the kernel
    that computes it (a global barrier), except as partial sums by an input that accumulates them
    linearly into a reduction over the same axes."""
    for (p, c), values in graph.edge_values.items():
        if p not in fusion or c not in fusion:
            continue
        prod, cons = program.calls[p], program.calls[c]
        for v in values:
            out = next(q for q, o in zip(prod.function.outputs, prod.outputs) if o is v)
            for q, a in zip(cons.function.inputs, cons.args):
                if isinstance(a, ScalarArg) and a.reads(v):
                    return (f"{cons.text()} takes {v.name} as a scalar argument, which {prod.text()} "
                            "computes from every instance: a global barrier")
                if a is not v:
                    continue
                if q.index != out.index:
                    return (f"{cons.text()} reads {v.name} along {''.join(q.index) or '-'}, "
                            f"{prod.text()} makes it along {''.join(out.index) or '-'}: a global barrier")
                if out.reduce and not q.partial:
                    return f"{cons.text()} uses the reduction result {v.name} of {prod.text()}: a global barrier"
                if q.partial and not out.reduce:
                    return f"{cons.text()} takes partial sums as {q.name}, but {v.name} is a map result"
    return None


def no_cycle_outside(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> str | None:
    """No dependency path may leave the fusion and come back (that call would have to run inside)."""
    inside = down = up = 0
    for a in fusion:
        inside |= 1 << a
        down |= graph.descendants[a]
        up |= graph.ancestors[a]
    between = down & up & ~inside
    if between:
        x = (between & -between).bit_length() - 1          # the first such call
        return f"{program.calls[x].text()} depends on the fusion and the fusion depends on it"
    return None


def saves_traffic(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> str | None:
    """A fusion must save global transfers: its calls must be connected by values they exchange or
    inputs they share (read once for all)."""
    links: dict[int, set[int]] = {i: set() for i in fusion}
    for (p, c) in graph.edge_values:
        if p in fusion and c in fusion:
            links[p].add(c)
            links[c].add(p)
    for v, readers in graph.shared_inputs.items():
        inside = [r for r in readers if r in fusion]
        for a, b in combinations(inside, 2):
            if _same_element(program, v, a, b):
                links[a].add(b)
                links[b].add(a)
    start = min(fusion)
    seen, stack = {start}, [start]
    while stack:
        for y in links[stack.pop()] - seen:
            seen.add(y)
            stack.append(y)
    if seen != set(fusion):
        lonely = program.calls[min(set(fusion) - seen)]
        return f"{lonely.text()} shares no data with the rest of the fusion: nothing saved"
    return None


def call_set(calls) -> str:
    """Calls as the explanations name them: ``{c0, c2}``."""
    return "{" + ", ".join(f"c{i}" for i in sorted(calls)) + "}"


def _same_element(program: Program, vid: int, a: int, b: int) -> bool:
    """Do calls a and b read value vid as the same element (same instance axes)?"""
    def index(c: Call):
        return {q.index for q, x in zip(c.function.inputs, c.args) if isinstance(x, Value) and x.id == vid}
    return bool(index(program.calls[a]) & index(program.calls[b]))


RULES = (same_nesting, same_instances, exchanges_on_chip, no_cycle_outside, saves_traffic)
HORIZONTAL_RULES = (same_nesting, same_instances, exchanges_on_chip, no_cycle_outside)


def why_not_horizontal(program: Program, graph: DependencyGraph, a: frozenset[int], b: frozenset[int]) -> str | None:
    """Horizontal fusion: two kernels' calls that exchange nothing (no dependency path between
    them either way) may share a kernel -- nothing is saved in transfers, one launch is -- when
    they have one nesting depth and instance space.  None when allowed, else the reason."""
    down_a = up_a = 0
    for x in a:
        down_a |= graph.descendants[x]
        up_a |= graph.ancestors[x]
    bits = sum(1 << x for x in b)
    if (down_a | up_a) & bits:
        first, second = (a, b) if down_a & bits else (b, a)
        return f"dependent: {call_set(second)} depends on {call_set(first)}"
    for rule in HORIZONTAL_RULES:
        reason = rule(program, graph, a | b)
        if reason:
            return f"{rule.__name__}: {reason}"
    return None


def why_not(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> str | None:
    """The first rule that refuses the fusion, as 'rule: reason'; None when it is legal."""
    if len(fusion) < 2:
        return None
    for rule in RULES:
        reason = rule(program, graph, fusion)
        if reason:
            return f"{rule.__name__}: {reason}"
    return None
