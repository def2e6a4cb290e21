"""Fusion engine: legality, enumeration, plans and the structure of fused kernels (CPU)."""
import itertools
import subprocess
from dataclasses import replace

import pytest

import kfuse
from kfuse.codegen.kernel import build_kernel
from kfuse.errors import FusionError
from kfuse.frontend import parse_script
from kfuse.fusion.legality import why_not
from kfuse.fusion.reasons import Cycle, ReductionBarrier
from kfuse.ir.graph import DependencyGraph

from conftest import EXAMPLES, ROOT
from fusion_util import covering_programs
from test_codegen import loop_body


def best(name, **kw):
    return kfuse.compile(ROOT / "examples" / f"{name}.kf", **kw)


def kernel_calls(prog):
    return [[kc.call.function.name for kc in k.spec.calls] for k in prog.kernels]


@pytest.mark.parametrize("name, kernels", [
    ("bicgk", [["gemv", "gemtv"]]),
    ("gemver", [["ger", "ger", "gemtv"], ["gemv"]]),
    ("axpydot", [["axpy", "dot"]]),
    ("vadd", [["vadd", "vadd"]]),
    ("waxpby", [["scal", "axpy"]]),
    ("atax", [["gemv", "gemtv"]]),         # one pass: rows of 8192 fit a block (tests/test_onepass.py)
    ("sgemvt", [["gemtv"], ["gemv"]]),
    ("sgemv", [["gemv"]]), ("sscal", [["scal"]]), ("madd", [["madd"]]),
])
def test_expected_plans(name, kernels):
    assert kernel_calls(best(name)) == kernels


def test_bicgk_reads_A_once():
    k = best("bicgk").kernels[0]
    loads = [s for s in k.steps if s.routine is not None and s.routine.kind == "load"
             and s.kc.call.bindings()[s.routine.param].name == "A"]
    assert len(loads) == 1                                   # one load routine for A
    assert k.source.count("(rix, g_A,") == k.spec.span       # called once per instance of the block
    assert {a.name for a in k.launch.args if a.kind == "array"} == {"A", "p", "q", "r", "s"}


def test_gemver_keeps_B1_on_chip_and_writes_B_once():
    prog = best("gemver")
    k0, k1 = prog.kernels
    assert "g_B1" not in k0.source and "e_B1" in k0.source  # B1 never leaves the chip
    U = k0.spec.unroll
    assert k0.source.count("tile_store") == U                # B stored once per instance ...
    copies = [f"e_B_u{u}" for u in range(U)] if U > 1 else ["e_B"]   # one register copy per unrolled instance
    assert all(k0.source.count(f"(rix, {c}, g_B)") == 1 for c in copies)
    assert "g_B" in k1.source and "tile_load" in k1.source  # the global barrier: B read again
    assert not k0.placement.shared and "__syncthreads" not in k0.source


def test_vadd_intermediate_neither_stored_nor_loaded():
    k = best("vadd").kernels[0]
    U = k.spec.unroll
    assert "g_t" not in k.source and k.source.count("_load<") + k.source.count("_load(") == 3 * U  # w, y, z
    assert k.source.count("_store(") + k.source.count("_store<") == U


def test_axpydot_stores_z_and_dot_reads_it_on_chip():
    k = best("axpydot").kernels[0]
    U = k.spec.unroll
    assert "g_z" in k.source and k.source.count("_load(") + k.source.count("_load<") == 3 * U  # not z
    assert [v.name for v, _ in k.launch.clears] == ["r"]


def test_refusals_carry_reasons():
    prog = best("sgemvt").program       # gemtv's reduction over i: no variant spans i whole
    g = DependencyGraph(prog)
    refusal = why_not(prog, g, frozenset({0, 1}))
    assert refusal is not None and refusal.rule == "exchanges_on_chip"
    assert isinstance(refusal.reason, ReductionBarrier) and refusal.reason.axes == ("i",)
    assert "global barrier" in str(refusal)
    prog = best("gemver").program
    refusal = why_not(prog, DependencyGraph(prog), frozenset({0, 2}))
    assert refusal is not None and isinstance(refusal.reason, Cycle) and str(refusal).startswith("no_cycle_outside")


def test_different_nesting_names_the_calls(lib):
    p = parse_script("matrix A, B; vector u, v; scalar d; input A, u, v; B = ger(A, u, v); d = dot(u, u); "
                     "return B, d;", lib)
    assert str(why_not(p, DependencyGraph(p), frozenset({0, 1}), on_strips_rows=True)) == (
        "same_nesting: nesting depths [1, 2] differ: B = ger(A, u, v) walks instances over 2 axes, "
        "d = dot(u, u) over 1 (no variant of ger walks strips of whole rows)")
    p = parse_script("matrix A; vector p, q; scalar d; input A, p; q = gemv(A, p); d = dot(p, q); return q, d;", lib)
    assert str(why_not(p, DependencyGraph(p), frozenset({0, 1}))) == (
        "same_nesting: nesting depths [1, 2] differ: q = gemv(A, p) walks instances over 2 axes, "
        "d = dot(p, q) over 1 (a kernel walks one nesting; vector calls on the rows of strips: vector_on_strips=True)")


@pytest.mark.parametrize("script, rule", [
    ("matrix A, B; vector u, v; scalar d; input A, u, v; B = ger(A, u, v); d = dot(u, u); return B, d;",
     "same_nesting"),
    ("matrix A, B; vector x, y, u, v; input A, B, x, u; y = gemv(A, x); v = gemv(B, u); return y, v;",
     "same_instances"),
    ("vector x[n], y[n], u[n], v[n]; input x, u; y = scal(2, x); v = scal(3, u); return y, v;", "saves_traffic"),
    ("matrix A; vector x, y, z; input A, x; y = gemtv(A, x); z = gemv(A, y); return z;", "exchanges_on_chip"),
])
def test_rules(script, rule):
    prog = kfuse.compile(script, fuse=False).program
    reason = why_not(prog, DependencyGraph(prog), frozenset(range(len(prog.calls))))
    assert reason is not None and reason.rule == rule and str(reason).startswith(rule), reason


def test_same_shaped_matrices_do_fuse():
    prog = kfuse.compile("matrix A[n, n], B[n, n]; vector x[n], y, v; input A, B, x; "
                         "y = gemv(A, x); v = gemv(B, x); return y, v;")
    assert kernel_calls(prog) == [["gemv", "gemv"]]
    k = prog.kernels[0]
    assert k.source.count("(rix, g_x,") == k.spec.unroll    # x read once for both products


def test_partial_sums_exchanged_as_per_iteration_deltas():
    prog = best("gesummv")
    assert kernel_calls(prog) == [["gemv", "gemv"]]           # one kernel reading x once
    fused = prog.search.ranked[frozenset({0, 1})]
    assert {impl.loop for _, impl, _ in fused} == {"i", "j"}
    # the best kernel of warp-wide partial sums (strips, which complete t in the block, aside)
    k = next(code for _, _, code in fused if not any(kc.variant.whole for kc in code.spec.calls))
    assert "g_t" not in k.source                              # t stays on chip as partial sums
    pre, loop, post = loop_body(k.source)
    if k.spec.loop == "j":                                    # y accumulates, t is cleared each time
        assert "e_y.v[k] = real(0)" in pre and "e_t" in loop and "real(0)" in loop
    spec = replace(k.spec, stores=k.spec.stores | {prog.program.values[-2].id})   # also return t
    assert prog.program.values[-2].name == "t"
    with pytest.raises(FusionError, match="partial sums are exchanged only when"):
        build_kernel(replace(spec, loop="j"), prog.library)


def test_plans_come_best_first_and_are_counted():
    search = best("bicgk").search
    plans = list(itertools.islice(search.plans(), 200))
    costs = [p.predicted for p in plans]
    assert costs == sorted(costs)
    assert len(plans) == min(200, search.count_plans())
    keys = {tuple((k.name, tuple((kc.call.index, kc.variant.name, kc.macros) for kc in k.calls), k.loop,
                   k.unroll, k.ipb, k.span) for k in p.kernels) for p in plans}
    assert len(keys) == len(plans)                           # no plan twice
    small = best("sscal").search
    assert len(list(small.plans())) == small.count_plans()


def test_explain_lists_counts_and_refusals():
    text = best("gemver").search.explain()
    assert text.startswith("3 legal fusion(s)") and "refused:" in text and "no_cycle_outside" in text


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in ("gemver", "gesummv") else p
                                  for p in EXAMPLES], ids=lambda p: p.stem)      # those two: 25-35 s each
def test_every_implementation_compiles(nvcc, tmp_path, path):
    """One nvcc build per partition holding every implementation of every kernel of the example,
    unoptimised (``-Xcicc -O0 -Xptxas -O0``: parsed, checked and assembled whole, in a third of
    the time; the examples' chosen plans are built optimised in test_nvcc.py)."""
    for n, progs in enumerate(covering_programs(path, "float32")):
        cu = tmp_path / f"m{n}.cu"
        cu.write_text(progs[0].cuda_source)
        proc = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-std=c++17", "-Xcicc", "-O0", "-Xptxas", "-O0",
                               "-o", str(tmp_path / "m.cubin"), str(cu)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_plan_search_spans_and_plan_by_index():
    """The seams the experiments use: ``PlanSearch(spans=...)`` ranks a space with other spans (the
    default is kfuse's), and ``plan(blocks, idx)`` gives the plan of chosen ranked implementations."""
    from kfuse.fusion.plans import PlanSearch
    from kfuse.fusion.space import SPANS
    c = best("bicgk", tuned=False, calibration=False)
    spans_of = lambda search: {i.span for impls in search.space.impls.values() for i, _ in impls}  # noqa: E731
    assert spans_of(c.search) == set(SPANS)
    assert spans_of(PlanSearch(c.program, c.library, spans=(1, 8))) == {1, 8}
    s = c.search
    first = s.best()
    blocks = next(b for b in s.partitions if {frozenset(kc.call.index for kc in k.calls) for k in first.kernels}
                  == set(b))
    assert s.plan(blocks, (0,) * len(blocks)).describe() == first.describe()
    second = s.plan(blocks, (1,) * len(blocks))
    assert set(second.implementations) == {s.ranked[b][1][1] for b in blocks}


def test_kernels_looping_along_j_stack_at_most_two_tiles():
    """A span across a loop along j stacks tiles along i; spans of 4 there never measured best and
    ran up to 1.76x slower (docs/design.md, "Spans along the rows"): not built.  A
    loop along i keeps every span."""
    from kfuse.fusion.prune import MAX_SPAN_LOOP_J
    from kfuse.fusion.space import SPANS
    c = best("gemver", tuned=False, calibration=False)
    built = {(i.loop, i.span) for impls in c.search.space.impls.values() for i, _ in impls}
    assert {s for lp, s in built if lp == "i"} == set(SPANS)
    assert {s for lp, s in built if lp == "j"} == {s for s in SPANS if s <= MAX_SPAN_LOOP_J}
    assert MAX_SPAN_LOOP_J < max(SPANS)
    assert f"spanning more than {MAX_SPAN_LOOP_J} tiles along i in a loop along j (not built)" in c.search.explain()


def test_a_warp_wide_routine_never_runs_in_part_of_a_warp(lib):
    """quad_dot_store sums over the 32 lanes of a warp: beside a warp-wide axpy (32 threads per
    instance) only 8 lanes of each warp would run it -- a wrong sum (it was chosen, and wrong on
    the GPU).  The layout refuses it, so no implementation of the search holds it."""
    from kfuse.ir.kernel import KernelCall, KernelSpec
    text = ("scalar a, r; vector v, w, u, z; input a, v, w, u; z = axpy(-a, v, w); r = dot(z, u); return r;")
    from kfuse.frontend import parse_script
    prog = parse_script(text, lib)
    axpy, dot = prog.calls
    var = {c.function.name: {v.name: v for v in c.function.variants} for c in (axpy, dot)}
    spec = KernelSpec("k", (KernelCall(axpy, var["axpy"]["warp"]), KernelCall(dot, var["dot"]["quad"])),
                      ipb=8, stores=frozenset({dot.outputs[0].id}))
    with pytest.raises(FusionError, match="exchanges values between the lanes of a warp"):
        build_kernel(spec, lib)
    ok = KernelSpec("k", (KernelCall(axpy, var["axpy"]["quad"]), KernelCall(dot, var["dot"]["quad"])),
                    ipb=8, stores=frozenset({dot.outputs[0].id}))
    assert build_kernel(ok, lib)
    search = kfuse.compile(text, tuned=False, calibration=False).search
    chosen = {tuple(kc.variant.name for kc in code.spec.calls)
              for impls in search.space.impls.values() for _, code in impls}
    assert ("quad", "quad") in chosen and ("warp", "quad") not in chosen


def test_serial_sections_beside_other_calls_only_where_the_grid_is_one_wave(lib):
    """A fused kernel whose loop runs part of a variant's threads behind a barrier (gemv/smem reads
    its scratch back with 32 threads every iteration) stalls the other calls' streams: where the
    grid fills the GPU such kernels are dropped when an implementation without one fits (1.00-1.49x
    on random scripts at n >= 2048); on one wave or less (n = 1024 here) they stay."""
    from kfuse.ir.kernel import KernelCall, KernelSpec
    text = ("matrix A, B, M; vector x, u, y; input A, B, x; u = gemtv(A, x); y = gemv(A, x); "
            "M = madd(A, B); return u, y, M;")
    prog = parse_script(text, lib)
    gemv = prog.calls[1]
    var = {v.name: v for v in gemv.function.variants}
    smem = build_kernel(KernelSpec("k", (KernelCall(gemv, var["smem"], (("BY", 8),)),), loop="i",
                                   stores=frozenset({gemv.outputs[0].id})), lib)
    shfl = build_kernel(KernelSpec("k", (KernelCall(gemv, var["shfl"], (("BY", 8),)),), loop="i",
                                   stores=frozenset({gemv.outputs[0].id})), lib)
    assert smem.serial_in_loop and not shfl.serial_in_loop
    three = frozenset({0, 1, 2})
    for n in (8192, 2048, 1024):
        search = kfuse.compile(text, sizes={"A.rows": n, "A.cols": n}, tuned=False).search
        ranked = [code for _, _, code in search.ranked[three]]
        built = [code for _, code in search.space.impls[three]]
        assert any(not c.serial_in_loop for c in ranked)
        assert not any(c.serial_in_loop and search.ranker.waves(c) > 1 for c in ranked), n
        if n > 1024:
            assert any(c.serial_in_loop and search.ranker.waves(c) > 1 for c in built), n     # built, left out
            assert "with a serial section in the loop beside other calls, on a full GPU (left out)" in search.explain()
        else:       # every grid is one wave or less: kept
            assert any(c.serial_in_loop for c in ranked) and all(search.ranker.waves(c) <= 1 for c in built)
            assert "serial section" not in search.explain()
