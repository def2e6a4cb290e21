"""The planner at scale, on the CPU: fusions of one shape laid out once (and ranked exactly as when
each is laid out itself), the kernels of the search's shared analyses equal to those built alone,
horizontal fusion of independent kernels with its reasons, the kernel parameter-space limit, and
plan time of long scripts (printed, not asserted)."""
import time

import pytest

import kfuse
from kfuse.errors import FusionError
from kfuse.codegen.frame import MAX_PARAM_BYTES, check_param_space
from kfuse.codegen.kernel import build_kernel
from kfuse.frontend import parse_script
from kfuse.frontend.random_scripts import random_script
from kfuse.fusion.plans import PlanSearch
from kfuse.fusion.space import build_space, fusion_shape, implementations, stores_of
from kfuse.ir.kernel import GlobalArg
from kfuse.ir.program import Value

from test_nvcc import nvcc_compile
from test_random_scripts import plan_is_valid

INDEPENDENT = """
scalar a, b;
matrix A1[n, n], A2[n, n];
vector x1[n], x2[n], y1[n], y2[n], x3[n], z3[n], x4[n], z4[n], w[m], u[m];
input a, b, A1, A2, x1, x2, x3, x4, w;
y1 = gemtv(A1, x1);
y2 = gemtv(A2, x2);
z3 = scal(a, x3);
z4 = scal(b, x4);
u = scal(b, w);
return y1, y2, z3, z4, u;
"""
SMALL = {"n": 1024, "m": 1024}     # where a matrix-vector product alone cannot fill the GPU


def _wide(n):
    return ("scalar a; vector x, z, " + ", ".join(f"y{i}" for i in range(n)) + "; input a, x, z;\n"
            + "\n".join(f"y{i} = axpy(a, x, z);" if i % 2 else f"y{i} = scal(a, x);" for i in range(n))
            + "\nreturn " + ", ".join(f"y{i}" for i in range(n)) + ";")


def _described(program, ranked):
    return [(round(t, 9), impl.describe(program)) for t, impl, _ in ranked]


@pytest.mark.parametrize("seed", [3, 17, pytest.param(40, marks=pytest.mark.slow)])
def test_shared_layouts_rank_like_separate_ones(lib, seed):
    """Every fusion's implementations, built through the shape memo and built alone, are the same
    choices with the same predictions."""
    text = random_script(lib, seed, calls=14).text if seed != 40 else _wide(14)
    program = parse_script(text, lib)
    search = PlanSearch(program, lib, horizontal=False)
    space = search.space
    for calls, ranked in search.ranked.items():
        alone, _ = implementations(program, space.graph, lib, calls, sampled=space.bounded is not None)
        if len(calls) > 1 and space.bounded is not None and calls in {b for b in search.partitions[0]}:
            continue        # refined: more implementations than the sampled ones
        assert _described(program, search.ranker.rank(alone)) == _described(program, ranked), sorted(calls)


@pytest.mark.parametrize("seed", [3, 8, 21])
def test_kernels_of_the_schedule_memo_equal_kernels_built_alone(lib, seed):
    """The search's kernels -- analyses shared through its ScheduleMemo: schedule prefixes, the twins
    along j of kernels scheduled along i, their placements and frames -- are the kernels built
    alone from the same specs (those of a fusion of the same shape, made for other calls, left out)."""
    program = parse_script(random_script(lib, seed, calls=14, matrix=True).text, lib)
    space = build_space(program, lib)
    assert space.bounded is not None
    loops = set()
    for calls, impls in space.impls.items():
        for impl, code in impls:
            if {kc.call.index for kc in code.spec.calls} != set(calls):
                continue
            alone = build_kernel(code.spec, lib)
            assert code.launch == alone.launch and code.placement == alone.placement, impl.describe(program)
            assert ([(s.phase, s.kind, s.routine, s.accesses, s.barrier, s.once_per_span) for s in code.steps]
                    == [(s.phase, s.kind, s.routine, s.accesses, s.barrier, s.once_per_span) for s in alone.steps])
            loops.add((code.spec.nesting, code.spec.loop))
    assert (2, "j") in loops


def test_repeated_shapes_are_laid_out_once(lib):
    program = parse_script(_wide(40), lib)
    space = build_space(program, lib)
    assert space.bounded is not None
    assert len(space.shapes) < len(space.impls) / 4
    g = space.graph
    a, b = frozenset({0, 1}), frozenset({2, 3})        # scal + axpy, twice
    assert fusion_shape(program, g, a, stores_of(program, g, a)) == fusion_shape(program, g, b, stores_of(program, g, b))
    c = frozenset({1, 2})                               # axpy + scal: another order
    assert fusion_shape(program, g, a, stores_of(program, g, a)) != fusion_shape(program, g, c, stores_of(program, g, c))


def test_horizontal_fusion_merges_independent_calls_with_reasons(nvcc, tmp_path):
    """At n = 1024 (shipped H100 calibration) the two independent products share a kernel; the
    vector calls do not merge: they would save only a launch, which is not counted."""
    prog = kfuse.compile(INDEPENDENT, tuned=False, sizes=SMALL)
    plan_is_valid(prog)
    kernels = [sorted(kc.call.index for kc in k.calls) for k in prog.plan.kernels]
    assert [0, 1] in kernels and [2] in kernels and [3] in kernels and [4] in kernels
    text = prog.search.explain()
    assert "{c0} + {c1}: one kernel, predicted" in text
    assert "no saving beyond a launch" in text
    assert "same_instances" in text                          # u = scal(b, w) walks m, not n
    apart = kfuse.compile(INDEPENDENT, tuned=False, sizes=SMALL, horizontal=False)
    assert len(apart.plan.kernels) == 5
    assert prog.plan.predicted < apart.plan.predicted
    nvcc_compile(nvcc, prog.cuda_source, tmp_path, "horizontal")


def test_scalar_results_are_not_used_in_the_kernel_computing_them(lib):
    """A dot's result taken as a scalar argument needs every block: never in the dot's kernel,
    and a later kernel reads it where it lies (by address, no host round trip)."""
    text = ("scalar a, s; vector x, y, z, w; input a, x, y, z;\n"
            "s = dot(x, y);\nw = axpby(s, z, a, x);\nreturn w;")
    prog = kfuse.compile(text, tuned=False)
    assert [len(k.calls) for k in prog.plan.kernels] == [1, 1]
    assert "takes s as a scalar argument" in prog.search.explain()
    assert "const real* __restrict__ s_s_p" in prog.cuda_source and "(*s_s_p)" in prog.cuda_source


def test_horizontal_fusion_refuses_dependent_kernels():
    # rows of 140000 fit no block and no cluster: two kernels (at 8192 ATAX runs in one pass)
    prog = kfuse.compile(Path_examples("atax"), calibration=False, tuned=False, sizes={"n": 140000})
    assert "not fused: dependent: {c1} depends on {c0}" in prog.search.explain()
    assert len(prog.plan.kernels) == 2


def Path_examples(name):
    from conftest import EXAMPLES
    return next(p for p in EXAMPLES if p.stem == name)


def test_kernel_parameter_space_is_checked():
    vec = Value(0, "x", "x", "vector", (0,))
    small = tuple(GlobalArg("array", f"x{i}", vec) for i in range(10))
    check_param_space("k", small)
    big = tuple(GlobalArg("array", f"x{i}", vec) for i in range(MAX_PARAM_BYTES // 16 + 1))
    with pytest.raises(FusionError, match="parameter space"):
        check_param_space("k", big)


@pytest.mark.parametrize("kind", ["wide", "random"])
def test_hundred_call_scripts_plan(lib, kind):
    """Plan time of 100-call scripts with the calibrated model (printed: a benchmark, not a goal
    asserted here; docs/performance.md, 'Planning time', holds the measured table)."""
    text = _wide(100) if kind == "wide" else random_script(lib, 5, calls=100).text
    t0 = time.perf_counter()
    prog = kfuse.compile(text, tuned=False)
    print(f"{kind}: 100 calls planned in {time.perf_counter() - t0:.2f} s, {len(prog.kernels)} kernel(s)")
    plan_is_valid(prog)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_element_passed_twice_to_a_routine_builds(lib, nvcc, tmp_path, dtype):
    """``v3 = axpy(-a, v2, v2)`` with v2 in shared memory (written by a quad scal, read by a warp
    axpy: another mapping): one view of v2, declared once."""
    from kfuse.codegen.kernel import build_kernel
    from kfuse.codegen.module import module_source
    from kfuse.ir.kernel import KernelCall, KernelSpec
    prog = parse_script("scalar a; vector x, v2, v3; input a, x; v2 = scal(-a, x); v3 = axpy(-a, v2, v2); "
                        "return v3;", lib)
    scal, axpy = prog.calls
    var = {c.function.name: {v.name: v for v in c.function.variants} for c in prog.calls}
    code = build_kernel(KernelSpec("k", (KernelCall(scal, var["scal"]["quad"]), KernelCall(axpy, var["axpy"]["warp"])),
                                   ipb=8, stores=frozenset({axpy.outputs[0].id})), lib)
    assert "axpy_compute(rix, v_v2, v_v2, " in code.source      # one view, passed twice
    assert code.source.count("KfSh_subvector32_lane_32x1 v_v2{") == 1
    nvcc_compile(nvcc, module_source([code], lib, dtype), tmp_path, f"twice_{dtype}")
