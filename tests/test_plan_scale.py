"""Planning time of long scripts (issue 44, finding 5: planning grew as n^2 past about 200 calls):
1,000 random calls plan within a generous bound (30 s); the greedy partition of a bounded search makes
the merges of the scan of every option it replaced; the kernel graph kept under merges
(``fusion/blocks.py``) refuses exactly the merges that make a cycle and keeps a topological order."""
import random
import time

import kfuse
from kfuse.frontend import parse_script
from kfuse.frontend.random_scripts import random_script
from kfuse.fusion.blocks import BlockGraph
from kfuse.cost.transfer import DEFAULT_MACHINE
from kfuse.fusion.partition import greedy_partitions, kernel_order, ordered
from kfuse.fusion.plans import PlanSearch
from kfuse.fusion.rank import Ranker, planning_dims, rank_space
from kfuse.ir.program import entries_of
from kfuse.fusion.legality import _read_index, saves_traffic, why_not
from kfuse.fusion.space import build_space, grow_fusions
from kfuse.ir.graph import DependencyGraph

from test_random_scripts import plan_is_valid


def test_a_thousand_random_calls_plan(lib):
    """About 4-5 s on the 2-core machine (12-27 s before issue 44, finding 5); the bound only catches a return to
    quadratic time."""
    text = random_script(lib, 1, calls=1000).text
    t0 = time.perf_counter()
    prog = kfuse.compile(text, tuned=False)
    seconds = time.perf_counter() - t0
    print(f"1000 random calls planned in {seconds:.2f} s, {len(prog.kernels)} kernel(s)")
    plan_is_valid(prog)
    assert seconds < 30


def _scanned_greedy(graph, calls, ranked) -> tuple[frozenset[int], ...]:
    """The greedy partition as planned before issue 44: each round scans every option, best
    saving first, and takes the first whose merge keeps the kernel order acyclic."""
    best = {c: r[0][0] for c, r in ranked.items()}
    where = {i: frozenset({i}) for i in range(calls)}
    fusions = [c for c in ranked if len(c) > 1]
    while True:
        options = []
        for c in fusions:
            parts = {where[i] for i in c}
            if len(parts) < 2 or any(not b <= c for b in parts):
                continue
            saving = sum(best[b] for b in parts) - best[c]
            if saving > 0:
                options.append((-saving, sorted(c), c, parts))
        options.sort(key=lambda t: (t[0], t[1]))
        for _, _, c, parts in options:
            if kernel_order(graph, list((set(where.values()) - parts) | {c})) is not None:
                for i in c:
                    where[i] = c
                break
        else:
            return tuple(ordered(graph, set(where.values())))


def test_greedy_partition_merges_as_the_scan_did(lib):
    for seed, n in ((1, 40), (2, 80), (3, 150), (4, 60)):
        program = parse_script(random_script(lib, seed, calls=n).text, lib)
        dims = planning_dims(program, None)
        space = build_space(program, lib, dims=dims)
        assert space.bounded is not None
        ranked, _ = rank_space(space, Ranker(DEFAULT_MACHINE, dims, entries_of(program, dims), 4))
        greedy = greedy_partitions(space.graph, n, ranked)
        assert greedy[0] == _scanned_greedy(space.graph, n, ranked), (seed, n)
        search = PlanSearch(program, lib, horizontal=False)
        assert search.partitions[0] == greedy[0], (seed, n)


def test_block_graph_refuses_exactly_the_cyclic_merges(lib):
    rng = random.Random(5)
    for seed in range(6):
        program = parse_script(random_script(lib, seed, calls=40).text, lib)
        graph = DependencyGraph(program)
        dag = BlockGraph(graph)
        blocks = {i: frozenset({i}) for i in range(len(program.calls))}     # block id -> calls
        for _ in range(60):
            ids = rng.sample(sorted(blocks), min(len(blocks), rng.randint(2, 3)))
            calls = frozenset().union(*(blocks[b] for b in ids))
            merged = [c for b, c in blocks.items() if b not in ids] + [calls]
            acyclic = _acyclic(graph, merged)
            new = dag.merge(calls)
            assert (new is not None) == acyclic
            if new is not None:
                for b in ids:
                    del blocks[b]
                blocks[new] = calls
            assert set(dag.pos) == set(blocks)
            for b, calls_of in blocks.items():
                assert all(dag.block_of[c] == b for c in calls_of)
                for c in calls_of:      # every edge between blocks points forward in the order
                    for s in graph.succs[c]:
                        t = dag.block_of[s]
                        assert t == b or dag.pos[b] < dag.pos[t]


def test_legality_memo_gives_the_verdicts_of_a_fresh_graph(lib):
    """Verdicts kept in the graph's memo (each edge's exchange, each call's reads) are those of a
    graph asked for the first time, and linking a shared value's readers to its first reader
    connects the calls as linking every pair of them did."""
    for seed in (1, 2, 3):
        program = parse_script(random_script(lib, seed, calls=60).text, lib)
        warm = DependencyGraph(program)
        legal, refused, _ = grow_fusions(program, warm)
        for calls in [f.calls for f in legal] + list(refused):
            fresh = DependencyGraph(program)
            assert repr(why_not(program, warm, calls)) == repr(why_not(program, fresh, calls)), sorted(calls)
            assert (saves_traffic(program, warm, calls) is None) == _pairwise_linked(program, warm, calls)


def _pairwise_linked(program, graph: DependencyGraph, calls: frozenset[int]) -> bool:
    """saves_traffic's connectivity as it was found before: every pair of readers compared."""
    links = {i: set() for i in calls}
    for p, c in graph.edges_within(calls):
        links[p].add(c)
        links[c].add(p)
    for a in calls:
        for b in calls:
            ra, rb = _read_index(program, graph, a), _read_index(program, graph, b)
            if a != b and any(ra[v] & rb[v] for v in set(ra) & set(rb) if v in graph.shared_inputs):
                links[a].add(b)
    seen, todo = {min(calls)}, [min(calls)]
    while todo:
        for y in links[todo.pop()] - seen:
            seen.add(y)
            todo.append(y)
    return seen == set(calls)


def _acyclic(graph: DependencyGraph, blocks: list[frozenset[int]]) -> bool:
    where = {c: k for k, b in enumerate(blocks) for c in b}
    succ = [{where[s] for c in b for s in graph.succs[c]} - {k} for k, b in enumerate(blocks)]
    state = [0] * len(blocks)         # 0 new, 1 on the path, 2 done

    def visit(k: int) -> bool:
        state[k] = 1
        for m in succ[k]:
            if state[m] == 1 or (state[m] == 0 and not visit(m)):
                return False
        state[k] = 2
        return True
    return all(state[k] == 2 or visit(k) for k in range(len(blocks)))
