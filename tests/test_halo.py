"""A stencil after a stencil (or after a map) in one kernel: the halo recompute (ir/halo.py,
codegen/halo.py).  Legality (allowed only where the producer reads only global memory, refused
after a reduction, a gather, or a producer whose input is made in the kernel), explain(), the
cost model's price, and the generated kernels (nvcc builds them, both dtypes).  GPU runs:
tests/test_gpu_halo.py."""
from __future__ import annotations

import pytest

import kfuse
from kfuse.cost.transfer import Machine, gathered_values, halo_time
from kfuse.fusion.legality import why_not
from kfuse.ir.graph import DependencyGraph
from kfuse.ir.halo import neighbourhood, point_variant, reads_per_point, why_not_recomputed

from test_nvcc import nvcc_compile

SMALL = {"u.len": 4096}         # a size where recomputing the halo is the cheaper plan, given
FUSING = Machine(halo_latency=0.0)      # a transfer model that leaves out the recompute's latency

# (case, script, the functions of the fused kernel)
CASES = {
    "lap5_lap5": ("vector u, v, w;\ninput u;\nv = lap5(u);\nw = lap5(v);\nreturn w;\n", ["lap5", "lap5"]),
    "lap7_lap7": ("vector u, v, w;\ninput u;\nv = lap7(u);\nw = lap7(v);\nreturn w;\n", ["lap7", "lap7"]),
    "lap7v_lap7": ("vector c, u, v, w;\ninput c, u;\nv = lap7(u);\nw = lap7v(c, v);\nreturn w;\n",
                   ["lap7", "lap7v"]),
    "lap5v_lap5": ("vector c, u, v, w;\ninput c, u;\nv = lap5(u);\nw = lap5v(c, v);\nreturn w;\n",
                   ["lap5", "lap5v"]),
    "lap7_axpy": ("vector x, u, v, w;\nscalar a;\ninput a, x, u;\nv = axpy(a, x, u);\nw = lap7(v);\nreturn w;\n",
                  ["axpy", "lap7"]),
    "lap27_lap7_stored": ("vector u, v, w;\nscalar s;\ninput u;\nv = lap7(u);\nw = lap27(v);\ns = dot(v, w);\n"
                          "return v, w, s;\n", ["dot", "lap27", "lap7"]),
}


def _compile(script: str, dtype: str = "float32", sizes=SMALL, model=FUSING):
    return kfuse.compile(script, dtype=dtype, calibration=model, tuned=False, sizes=sizes)


def _groups(prog) -> list[list[str]]:
    return [sorted(kc.call.function.name for kc in k.spec.calls) for k in prog.kernels]


def _refusal(script: str, calls) -> str:
    prog = _compile(script, sizes=None)
    program = prog.program
    reason = why_not(program, DependencyGraph(program), frozenset(calls))
    return "" if reason is None else str(reason)


# -- legality -----------------------------------------------------------------------------------
def test_point_variants_of_the_shipped_maps():
    lib = kfuse.load_library()
    for name in ("lap5", "lap7", "lap27", "lap5v", "lap7v", "lap27v", "axpy", "scal", "vadd"):
        assert point_variant(lib.overloads(name)[0]).name == "quad", name
    for name in ("dot", "gemv", "spmv"):
        assert point_variant(lib.overloads(name)[0]) is None, name
    lap7, lap27, axpy = (lib.overloads(n)[0] for n in ("lap7", "lap27", "axpy"))
    assert (neighbourhood(lap7), neighbourhood(lap27), neighbourhood(axpy)) == (7, 27, 1)
    assert (reads_per_point(lap7), reads_per_point(axpy)) == (7, 2)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stencil_after_a_stencil_or_a_map_is_legal(case):
    script, _ = CASES[case]
    n = len(_compile(script).program.calls)
    assert _refusal(script, range(n)) == ""


def test_a_stencil_reading_a_gather_or_a_reduction_stays_refused():
    gather = ("csr A;\nvector p, v, w;\ninput A, p;\nv = spmv(A, p);\nw = lap7(v);\nreturn w;\n")
    why = _refusal(gather, (0, 1))
    assert "GatherBarrier" not in why and "reads the neighbours of each entry of v" in why, why
    assert "not recomputed across the halo: spmv gathers its input from anywhere" in why, why
    reduction = "matrix A;\nvector p, v, w;\ninput A, p;\nv = gemv(A, p);\nw = lap7(v);\nreturn w;\n"
    assert _refusal(reduction, (0, 1)).startswith("same_nesting")
    prog = _compile(reduction, sizes=None)
    gemv, lap7 = prog.program.calls
    assert why_not_recomputed(gemv, lap7, "neighbours") == "gemv is a map-reduce: its result at a point needs every instance"
    # the reverse of a stencil: a gather reading a stencil's result is no halo
    assert why_not_recomputed(lap7, gemv, "any").startswith("a gather reads entries anywhere")


def test_a_producer_whose_input_is_made_in_the_kernel_is_not_recomputed():
    script = ("vector x, u, y, v, w;\nscalar a;\ninput a, x, u;\ny = axpy(a, x, u);\nv = lap7(y);\nw = lap7(v);\n"
              "return w;\n")
    assert _refusal(script, (0, 1)) == "" and _refusal(script, (1, 2)) == ""
    why = _refusal(script, (0, 1, 2))
    assert why.startswith("exchanges_on_chip: w = lap7(v) reads the neighbours of each entry of v"), why
    assert why.endswith("not recomputed across the halo: y, which it reads, is made in this kernel too"), why
    # a scalar made in the kernel counts too
    scalar = ("vector x, u, v, w;\nscalar a, s;\ninput a, x, u;\ns = dot(x, u);\nv = axpy(s, x, u);\nw = lap7(v);\n"
              "return w;\n")
    assert _refusal(scalar, (1, 2)) == "" and "exchanges_on_chip" in _refusal(scalar, (0, 1, 2))


# -- explain and the cost model -----------------------------------------------------------------
def test_explain_names_the_stencil_recomputed_across_the_halo():
    prog = _compile(CASES["lap7_lap7"][0])
    assert ("halo recompute: c0 (v = lap7(u)) is evaluated at the points around each of c1's (w = lap7(v)) "
            "instead of reading v (its reads reach 2 point(s) around)") in prog.search.explain()
    assert _groups(prog) == [["lap7", "lap7"]]


def test_the_model_prices_the_recompute():
    small, large = (_compile(CASES["lap7_lap7"][0], sizes={"u.len": n}) for n in (4096, 2 ** 24))
    assert _groups(small) == [["lap7", "lap7"]]
    # at 2^24 points the 49 cached reads a point cost more than v's two passes and a launch
    assert _groups(large) == [["lap7"], ["lap7"]]
    (k,) = small.kernels
    assert gathered_values(k) == {small.program.inputs[0].id}      # u read, v evaluated
    entries = {v.id: 4096 for v in small.program.values}
    m = Machine()
    assert halo_time(k, entries, 4, m) == pytest.approx(4096 * 7 * 7 * 4 / m.cache_bandwidth + m.halo_latency)
    # a map's recompute reads at twice the pace; with the recompute's latency (the default model,
    # as measured) two kernels are the plan at 4096 points too, a stencil after a map fuses at 2^24
    axpy = _compile(CASES["lap7_axpy"][0])
    (ka,) = [k for k in axpy.kernels if len(k.spec.calls) > 1]
    assert halo_time(ka, {v.id: 4096 for v in axpy.program.values}, 4, FUSING) == pytest.approx(
        4096 * 7 * 2 * 4 / (2 * FUSING.cache_bandwidth))
    assert _groups(_compile(CASES["lap7_lap7"][0], model=False)) == [["lap7"], ["lap7"]]
    assert ["axpy", "lap7"] in _groups(_compile(CASES["lap7_axpy"][0], sizes={"u.len": 2 ** 24}, model=False))
    fused = next(f for f in large.search.explain().splitlines() if f.startswith("  fusion {c0, c1}"))
    assert fused and large.plan.predicted < 1e-4


# -- generated code -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_halo_kernels_compile(nvcc, tmp_path, case, dtype):
    script, fused = CASES[case]
    prog = _compile(script, dtype)
    assert fused in _groups(prog), _groups(prog)
    src = prog.cuda_source
    (k,) = [k for k in prog.kernels if len(k.spec.calls) > 1]
    halo = f"kf_halo_{k.spec.name}_v"
    assert f"struct {halo} {{" in src and f"const {halo} h_v{{v_nx, v_ny" in src
    stored = case.endswith("stored")
    # v's memory is read by nothing: the kernel takes it only where it stores it
    assert ("real* __restrict__ v_p" in src) == stored
    assert "g3zero_v" not in src and "g2zero_v" not in src
    # unoptimised: these modules' optimisation took 164-252 s of a first test run (issue 60, 18)
    nvcc_compile(nvcc, src, tmp_path, f"{case}_{dtype}", optimise=False)


def test_the_halo_view_reads_like_a_grid_view():
    src = _compile(CASES["lap7_axpy"][0]).cuda_source
    head = src[src.index("struct kf_halo_"):]
    head = head[:head.index("\n};")]
    for member in ("static constexpr int boundary = KF_ZERO;", "long long nx, ny, nz;", "KfVec in_x;",
                   "KfVec in_y;", "real s_alpha;", "KF_DEVICE long long n() const",
                   "KF_DEVICE bool inside(long long x, long long y, long long z) const",
                   "KF_DEVICE real ld(long long e) const", "KF_DEVICE void quad(long long e, real (&v)[4]) const",
                   "KF_DEVICE real get(long long x, long long y, long long z) const",
                   "quad_load(rix, in_x, e_x);", "axpy_compute(rix, e_x, e_y, e_out, s_alpha);"):
        assert member in head, member
    assert "h_v{v_nx, v_ny, v_nz, s_a, g_x, g_u}" in src
