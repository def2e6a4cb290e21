"""The plan search's stages as functions over frozen artifacts: ``space`` (the legal fusions and
their implementations, each laid out once) -> ``Spaced``; ``rank`` (each implementation priced
by a model) -> ``RankedSpace``; ``partition`` (partitions of the calls into kernels: exhaustive,
or greedy with bounded refinement; then the horizontal pass) -> ``Partitioned``.  The compiler's
pipeline (``compiler/pipeline.py``) calls them one by one, each named and timed; ``PlanSearch``
(``plans.py``) is built from the last and enumerates its plans best first.

The artifacts are frozen; the dicts they hold are not changed once a stage has returned (a later
stage that adds rankings makes a new dict)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.program import Program, entries_of
from ..library.schema import Library
from .horizontal import HorizontalInputs, Tried, horizontal_pass
from .partition import Partition, exhaustive_partitions, greedy_partitions, ordered, refine_chosen
from .rank import Ranked, Ranker, planning_dims, rank_space
from .reasons import Misfit, NoImplementation
from .space import SPANS, Space, build_space


@dataclass(frozen=True)
class SearchOptions:
    """What a search may build: nested kernels' spans, the horizontal pass, thread-block clusters
    (compute capability 9.0), vector calls on the rows of matrix calls' strips (off by default:
    docs/design.md, "Strips, clusters and bands")."""
    spans: tuple[int, ...] = SPANS
    horizontal: bool = True
    clusters: bool = True
    vector_on_strips: bool = False


@dataclass(frozen=True, eq=False)
class Spaced:
    """The space stage's artifact: the program's fusion space at the sizes planned for."""
    program: Program
    lib: Library
    dims: dict[int, int]          # dimension id -> the size planned for
    options: SearchOptions
    space: Space


@dataclass(frozen=True, eq=False)
class RankedSpace:
    """The rank stage's artifact: each fusion's implementations that fit, best predicted first,
    and why none fits for the others."""
    spaced: Spaced
    ranker: Ranker
    ranked: dict[frozenset[int], Ranked]
    sized_out: dict[frozenset[int], Misfit | NoImplementation]


@dataclass(frozen=True, eq=False)
class Partitioned:
    """The partition stage's artifact: the partitions searched (the horizontal pass's merged one
    last, if any) and the rankings they use (the rank stage's, with bounded refinement's and the
    horizontal pass's added)."""
    ranked_space: RankedSpace
    ranked: dict[frozenset[int], Ranked]
    partitions: tuple[Partition, ...]
    horizontal_log: tuple[Tried, ...]


def space(program: Program, lib: Library, sizes: dict[str, int] | None, options: SearchOptions) -> Spaced:
    """The space stage (``space.build_space``) at the sizes ``sizes`` (script size name -> value;
    the script's literals, else defaults, for the others)."""
    dims = planning_dims(program, sizes)
    return Spaced(program, lib, dims, options,
                  build_space(program, lib, options.spans, on_strips_rows=options.vector_on_strips, dims=dims))


def rank(spaced: Spaced, model, itemsize: int) -> RankedSpace:
    """The rank stage (``rank.rank_space``): every implementation priced by ``model`` (a
    ``cost.Model``) for elements of ``itemsize`` bytes."""
    ranker = Ranker(model, spaced.dims, entries_of(spaced.program, spaced.dims), itemsize, spaced.options.clusters)
    ranked, sized_out = rank_space(spaced.space, ranker)
    return RankedSpace(spaced, ranker, ranked, sized_out)


def partition(ranked_space: RankedSpace) -> Partitioned:
    """The partition stage: the partitions (``partition.py``: exhaustive for a small space, else
    greedy, the chosen one's kernels refined), then the horizontal pass over the best."""
    spaced, ranker = ranked_space.spaced, ranked_space.ranker
    graph, ranked = spaced.space.graph, ranked_space.ranked
    if spaced.space.bounded is None:
        partitions = exhaustive_partitions(graph, ranked)
    else:
        partitions = greedy_partitions(graph, len(spaced.program.calls), ranked)
        ranked = {**ranked, **refine_chosen(spaced.space, spaced.lib, partitions[0], ranker.score,
                                            spaced.options.spans, ranker.rank)}
    log: tuple[Tried, ...] = ()
    if spaced.options.horizontal:
        best = min(range(len(partitions)), key=lambda i: (_first_cost(ranked, partitions[i]), i))
        found = horizontal_pass(HorizontalInputs(spaced.program, graph, spaced.lib, spaced.space, spaced.options.spans,
                                                 ranker, ranked, spaced.options.vector_on_strips),
                                tuple(ordered(graph, partitions[best])))
        ranked = {**ranked, **found.ranked}
        log = tuple(found.log)
        if found.partition is not None:
            partitions = partitions + [found.partition]
    return Partitioned(ranked_space, ranked, tuple(partitions), log)


def _first_cost(ranked: dict[frozenset[int], Ranked], blocks: Partition) -> float:
    """The predicted time of a partition's best plan (each kernel's best implementation)."""
    return sum(ranked[b][0][0] for b in blocks)
