"""Plans: which calls run in which kernel, in launch order, with every implementation choice.

A plan covers every call once with kernels (fusion implementations and single-call kernels) whose
dependency graph is acyclic.  ``PlanSearch`` ranks plans by a cost model (``cost/``: the calibrated
one when ``kfuse.compile`` finds a calibration, else the transfer model) and yields them best
first, then the next best, for empirical search.

``PlanSearch`` holds the search's stages' results (``stages.py``: the space, ``space.py``; the
ranker, ``rank.py``; the partitioners, ``partition.py``: exhaustive, greedy and refinement for
bounded search; the horizontal pass, ``horizontal.py``) and the explainer (``explain.py``).  What
stays here is the k-best enumeration of plans over the partitions.
"""
from __future__ import annotations

import heapq
from typing import Iterator

from ..cost.transfer import DEFAULT_MACHINE, Machine
from ..ir.graph import DependencyGraph
from ..ir.kernel import KernelCall, KernelSpec
from ..ir.plan import Plan, kernel_name
from ..ir.program import Program
from ..library.schema import Library, Variant
from ..progress import no_timer
from . import explain as explainer
from . import stages
from .horizontal import Tried
from .partition import Partition, count_plans, ordered
from .reasons import Misfit, NoImplementation
from .rank import Ranked
from .shape import stores_of
from .space import SPANS, Space
from .stages import Partitioned, SearchOptions
from .ties import DEFAULT_BY

DEFAULT_IPB = 8         # preferred instances per block for unnested functions
DEFAULT_ITERS = 0       # serial iterations (0: chosen at launch from the sizes)


def default_macros(variant: Variant) -> tuple[tuple[str, int], ...]:
    out = []
    for name, values in variant.macros.items():
        pick = DEFAULT_BY if DEFAULT_BY in values else values[len(values) // 2]
        out.append((name, pick))
    return tuple(out)


def preferred_loop(fn) -> str:
    """Walk an axis that the reduced outputs leave out, so they accumulate across the loop."""
    for p in fn.outputs:
        if p.reduce:
            missing = [a for a in fn.axes if a not in p.index]
            if missing:
                return missing[0]
    return "i"


def unfused_plan(program: Program, lib: Library) -> Plan:
    """Every call its own kernel (the paper's "code without fusions"), in a dependency order."""
    graph = DependencyGraph(program)
    kernels = []
    for n, idx in enumerate(graph.topological_order()):
        call = program.calls[idx]
        variant = call.function.variants[0]
        ipb = 1
        if call.function.nesting == 1:
            allowed = variant.instances_per_block
            ipb = DEFAULT_IPB if DEFAULT_IPB in allowed else max(allowed)
        kernels.append(KernelSpec(kernel_name(n, [call.function.name]),
                                  (KernelCall(call, variant, default_macros(variant)),),
                                  iters=DEFAULT_ITERS, ipb=ipb, loop=preferred_loop(call.function),
                                  stores=frozenset(v.id for v in call.outputs)))
    return Plan(program, tuple(kernels))



class PlanSearch:
    """All plans of a program, ranked by a model (default: the transfer model) at the given sizes.

    Built from the partition stage's artifact (``of``; ``stages.py``); the constructor runs the
    stages itself (space, rank, partition), each timed by ``timer``.  The stages' results are
    kept as attributes; the methods enumerate plans best first and explain the search."""

    def __init__(self, program: Program, lib: Library, sizes: dict[str, int] | None = None,
                 itemsize: int = 4, machine: Machine = DEFAULT_MACHINE, model=None, timer=no_timer,
                 spans: tuple[int, ...] = SPANS, horizontal: bool = True, clusters: bool = True,
                 vector_on_strips: bool = False):
        options = SearchOptions(spans, horizontal, clusters, vector_on_strips)
        with timer("space"):
            spaced = stages.space(program, lib, sizes, options)
        with timer("rank"):
            ranked = stages.rank(spaced, model if model is not None else machine, itemsize)
        with timer("partition"):
            self._adopt(stages.partition(ranked), machine)

    @classmethod
    def of(cls, partitioned: Partitioned, machine: Machine = DEFAULT_MACHINE) -> "PlanSearch":
        """The search whose stages made ``partitioned``."""
        search = cls.__new__(cls)
        search._adopt(partitioned, machine)
        return search

    def _adopt(self, partitioned: Partitioned, machine: Machine) -> None:
        ranked_space = partitioned.ranked_space
        spaced, ranker = ranked_space.spaced, ranked_space.ranker
        self.program, self.lib, self.machine = spaced.program, spaced.lib, machine
        options = spaced.options
        self.clusters = options.clusters                # may kernels of thread-block clusters run?
        self.vector_on_strips = options.vector_on_strips  # may vector calls run on matrix calls' strips?
        self.spans, self.horizontal = options.spans, options.horizontal
        self.model = ranker.model       # a cost.Model: the calibrated model or the transfer model
        self.dims = spaced.dims
        self.space: Space = spaced.space
        self.graph: DependencyGraph = spaced.space.graph
        self.entries, self.itemsize, self.ranker = ranker.entries, ranker.itemsize, ranker
        self.ranked: dict[frozenset[int], Ranked] = partitioned.ranked
        # fusions no implementation of fits these sizes
        self.sized_out: dict[frozenset[int], Misfit | NoImplementation] = ranked_space.sized_out
        self.partitions: list[Partition] = list(partitioned.partitions)
        self.horizontal_log: list[Tried] = list(partitioned.horizontal_log)   # for explain()

    # -- counts ----------------------------------------------------------------------------
    def count_implementations(self) -> int:
        return explainer.count_implementations(self.ranked)

    def count_plans(self) -> int:
        return count_plans(self.partitions, self.ranked)

    # -- plans, best first -----------------------------------------------------------------------
    def plans(self) -> Iterator[Plan]:
        """Every plan in order of predicted time (k-best enumeration over each partition)."""
        heap: list[tuple[float, int, tuple[int, ...]]] = []
        seen: set[tuple[int, tuple[int, ...]]] = set()
        for pid, blocks in enumerate(self.partitions):
            idx = (0,) * len(blocks)
            heapq.heappush(heap, (self._cost(blocks, idx), pid, idx))
            seen.add((pid, idx))
        while heap:
            cost, pid, idx = heapq.heappop(heap)
            blocks = self.partitions[pid]
            yield self.plan(blocks, idx)
            for n in range(len(idx)):
                if idx[n] + 1 < len(self.ranked[blocks[n]]):
                    nxt = idx[:n] + (idx[n] + 1,) + idx[n + 1:]
                    if (pid, nxt) not in seen:
                        seen.add((pid, nxt))
                        heapq.heappush(heap, (self._cost(blocks, nxt), pid, nxt))

    def covering_plans(self) -> Iterator[tuple[int, Plan]]:
        """(partition index, plan) pairs that together use every implementation of every kernel of
        every partition: the m-th plan of a partition gives each block its m-th implementation
        (its last one when it has fewer)."""
        for pid, blocks in enumerate(self.partitions):
            for m in range(max(len(self.ranked[b]) for b in blocks)):
                idx = tuple(min(m, len(self.ranked[b]) - 1) for b in blocks)
                yield pid, self.plan(blocks, idx)

    def best(self) -> Plan:
        return next(self.plans())

    def _cost(self, blocks, idx) -> float:
        return sum(self.ranked[b][i][0] for b, i in zip(blocks, idx))

    def plan(self, blocks, idx) -> Plan:
        """The plan of partition ``blocks`` (one of ``partitions``) whose n-th kernel is the
        ``idx[n]``-th implementation of ``ranked[blocks[n]]`` (0: the best predicted)."""
        choice = dict(zip(blocks, idx))
        specs, parts, impls, codes = [], [], [], []
        for n, b in enumerate(ordered(self.graph, blocks)):
            t, impl, code = self.ranked[b][choice[b]]
            name = kernel_name(n, [self.program.calls[i].function.name for i in impl.order])
            # the search's kernel calls (what they memoise serves the lower stage's layouts too)
            specs.append(impl.spec(self.program, name, stores_of(self.program, self.graph, b),
                                   self.space.memo.calls))
            parts.append(t)
            impls.append(impl)
            codes.append(code)
        return Plan(self.program, tuple(specs), sum(parts), tuple(parts), tuple(impls), tuple(codes))

    # -- explanation -------------------------------------------------------------------------------
    def findings(self) -> explainer.Findings:
        return explainer.Findings(self.program, self.graph, self.space, self.ranker, self.ranked, self.sized_out,
                                  self.partitions, self.horizontal_log)

    def one_pass(self, calls: frozenset[int]) -> str | None:
        """``explain.one_pass``: why a fusion using a reduction's result may run in one pass, or not."""
        return explainer.one_pass(self.findings(), calls)

    def explain(self) -> str:
        return explainer.explain(self.findings())
