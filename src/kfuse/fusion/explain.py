"""The explainer: the plan search's findings in words (``kfuse --explain``, ``PlanSearch.explain``):
the fusions, their implementations and what was pruned (``prune.Prune``), one-pass reductions,
fallback variants, refused fusions and the horizontal pass."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..ir.graph import DependencyGraph
from ..ir.program import Program
from .horizontal import Tried
from .legality import fallback_lines, halo_recomputes, one_pass_exchanges
from .partition import Partition, count_plans
from .prune import Prune, render
from .reasons import Misfit, NoImplementation, call_set
from .rank import Ranked, Ranker
from .space import Space


@dataclass(frozen=True)
class Findings:
    """What a plan search found, as the explainer reads it."""
    program: Program
    graph: DependencyGraph
    space: Space
    ranker: Ranker
    ranked: dict[frozenset[int], Ranked]
    sized_out: Mapping[frozenset[int], Misfit | NoImplementation]
    partitions: Sequence[Partition]
    horizontal_log: Sequence[Tried]


def count_implementations(ranked: Mapping[frozenset[int], Ranked]) -> int:
    """Ranked implementations of fusions (of more than one call)."""
    return sum(len(v) for k, v in ranked.items() if len(k) > 1)


def one_pass(f: Findings, calls: frozenset[int]) -> str | None:
    """For a fusion that uses a reduction's result in the kernel that computes it: why it may
    (the reduction completes within a block at these sizes) or why not; None otherwise."""
    ex = one_pass_exchanges(f.program, f.graph, calls)
    if not ex:
        return None
    p, c, v, axes = ex[0]
    what = f"the reduction over {''.join(axes)} of c{p} ({f.program.calls[p].text()})"
    if calls not in f.ranked:
        reason = f.sized_out.get(calls, NoImplementation.BUILT)
        return f"two passes at these sizes: {what} cannot complete within a block or a cluster: {reason}"
    code = f.ranked[calls][0][2]
    L = code.launch
    n = next(k for k, a in enumerate(("i", "j")) if a in axes)
    length = f.ranker.dims[L.axis_dims[n]]
    where = (f"a cluster of {L.cluster} blocks of {L.threads} threads" if L.cluster > 1
             else f"a block of {L.threads} threads")
    return (f"one pass: {what} completes within {where} "
            f"({'rows' if axes == ('j',) else 'columns'} of {length} fit a strip of "
            f"{L.axis_extent[0]} x {L.axis_extent[1]}" + (f" per block, {L.cluster} blocks" if L.cluster > 1 else "")
            + f"); {v.name} never leaves the chip")


def halo_lines(f: Findings, calls: frozenset[int]) -> list[str]:
    """For a fusion with a stencil reading a value made inside: which call is recomputed across
    the halo, and how far its reads then reach (``ir/halo.py``)."""
    out = []
    for p, c, v in halo_recomputes(f.program, f.graph, calls):
        prod, cons = f.program.calls[p], f.program.calls[c]
        reach = cons.function.radius + prod.function.radius
        out.append(f"halo recompute: c{p} ({prod.text()}) is evaluated at the points around each of c{c}'s "
                   f"({cons.text()}) instead of reading {v.name} (its reads reach {reach} point(s) around)")
    return out


def explain(f: Findings) -> str:
    lines = _fusion_lines(f)
    if f.space.bounded:
        lines.insert(1, "search: " + f.space.bounded)
    if f.horizontal_log:
        lines.append("horizontal fusion (independent kernels of the best partition):")
        lines.extend(f"  {h}" for h in f.horizontal_log)
    return "\n".join(lines)


def pruned(f: Findings, calls: frozenset[int]) -> dict[Prune, int]:
    """What was left out of a fusion's implementations, by reason: the space's counts, and those
    the ranking left out for a serial section beside other calls' streams."""
    out = dict(f.space.pruned.get(calls, {}))
    ranker = f.ranker
    stalls = ranker.stalls([code for _, code in f.space.impls.get(calls, ()) if ranker.fits(code) is None])
    if stalls and not ranker.stalls([code for _, _, code in f.ranked[calls]]):
        out[Prune.SERIAL_BESIDE_STREAMS] = stalls
    return out


def _fusion_lines(f: Findings) -> list[str]:
    program = f.program
    lines = [f"{len(f.space.fusions)} legal fusion(s), {count_implementations(f.ranked)} fusion "
             f"implementation(s), {len(f.partitions)} partition(s), {count_plans(f.partitions, f.ranked)} plan(s)"]
    for fusion in f.space.fusions:
        calls = fusion.calls
        lines.append(f"  fusion {fusion}: " + "; ".join(program.calls[i].text() for i in sorted(calls)))
        lines += [f"    {line}" for line in halo_lines(f, calls)]
        if calls not in f.ranked:     # legal, but no implementation fits these sizes
            lines.append(f"    {one_pass(f, calls) or f.sized_out.get(calls, '')}")
            continue
        impls = f.ranked[calls]
        pr_text = render(pruned(f, calls))
        why = one_pass(f, calls)
        if why:
            lines.append(f"    {why}")
        lines.append(f"    {len(impls)} implementation(s)" + (f" (pruned: {pr_text})" if pr_text else "")
                     + f"; best predicted {impls[0][0] * 1e6:.1f} us: {impls[0][1].describe(program)}")
    lines += fallback_lines(f.ranked, f.space.impls, f.ranker.misfit)
    if f.space.refused:
        lines.append("refused:")
        for calls, reason in sorted(f.space.refused.items(), key=lambda kv: (len(kv[0]), sorted(kv[0]))):
            lines.append(f"  {call_set(calls)}: {reason}")
    return lines
