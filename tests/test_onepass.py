"""Fusion across a reduction (issue 18): a reduction's result used in the kernel that computes it
when the variants' tiles span the reduced axis whole -- the rule and its reasons, the plan chosen
per size, the generated kernel (compiled by nvcc for sm_90), the library metadata's validation."""

import pytest

import kfuse
from kfuse.errors import LaunchError, LibraryError
from kfuse.frontend import parse_script
from kfuse.fusion.legality import exchanges_on_chip, one_pass_exchanges, why_not
from kfuse.fusion.plans import PlanSearch
from kfuse.ir.graph import DependencyGraph
from kfuse.ir.program import entries_of

from conftest import EXAMPLES
from fusion_util import renamed
from test_nvcc import nvcc_compile
from kfuse.compiler.pipeline import uncovered_at

ATAX = next(p for p in EXAMPLES if p.stem == "atax")


def _program(lib, text):
    return parse_script(text, lib)


def _search(lib, n, dtype="float32"):
    prog = kfuse.compile(ATAX, dtype=dtype, tuned=False, sizes={"n": n})
    return prog


def test_rule_allows_a_reduction_result_used_whole_when_variants_span_the_axis(lib):
    p = _program(lib, "matrix A; vector x, t, y; input A, x; t = gemv(A, x); y = gemtv(A, t); return y;")
    g = DependencyGraph(p)
    assert exchanges_on_chip(p, g, frozenset({0, 1})) is None
    (prod, cons, v, axes), = one_pass_exchanges(p, g, frozenset({0, 1}))
    assert (prod, cons, v.name, axes) == (0, 1, "t", ("j",))


def test_rule_refuses_where_no_variant_spans_the_axis(lib):
    # gemtv(alpha, A, x) has no strip variant: its result still needs a global barrier
    p = _program(lib, "scalar a; matrix A; vector x, t, y; input a, A, x; t = gemv(a, A, x); y = gemtv(a, A, t); "
                      "return y;")
    reason = why_not(p, DependencyGraph(p), frozenset({0, 1}))
    assert str(reason).startswith("exchanges_on_chip: y = gemtv(a, A, t) uses the reduction result t of "
                             "t = gemv(a, A, x): a global barrier (no variants of gemv and gemtv span j whole)")


@pytest.mark.parametrize("dtype, n, threads", [("float32", 8192, 512), ("float32", 16384, 512),
                                               ("float64", 8192, 512), ("float32", 1000, 256)])
def test_one_pass_plan_where_rows_fit(dtype, n, threads):
    prog = _search(None, n, dtype)
    assert len(prog.kernels) == 1
    k = prog.plan.kernels[0]
    assert [kc.variant.name for kc in k.calls] == ["strip", "strip"]
    assert k.calls[0].macro("NC") >= n > k.calls[0].macro("NC") // 2 or k.calls[0].macro("NC") == 1024
    assert prog.kernels[0].launch.threads == threads
    assert prog.kernels[0].barriers == 1            # two copies of the warp partials: one barrier a strip
    why = prog.search.one_pass(frozenset({0, 1}))
    assert why.startswith(f"one pass: the reduction over j of c0 (t = gemv(A, x)) completes within a block of "
                          f"{threads} threads (rows of {n} fit a strip of ")
    assert why in prog.search.explain()


ATAX_MN = "matrix A[m, n]; vector x[n], t[m], y[n]; input A, x; t = gemv(A, x); y = gemtv(A, t); return y;"


@pytest.mark.parametrize("dtype, n, reason", [
    ("float32", 131073, "rows of 131073 do not fit a strip of 16384 x 8 blocks (one cluster must cover them)"),
    ("float64", 65537, "registers per thread at 64-bit entries"),
])
def test_two_kernels_where_rows_do_not_fit(dtype, n, reason):
    prog = kfuse.compile(ATAX_MN, dtype=dtype, tuned=False, sizes={"m": 33, "n": n})
    assert len(prog.kernels) == 2
    assert not any(kc.variant.whole for k in prog.plan.kernels for kc in k.calls)
    why = prog.search.one_pass(frozenset({0, 1}))
    assert why.startswith("two passes at these sizes: the reduction over j of c0 (t = gemv(A, x)) cannot "
                          "complete within a block or a cluster: ") and reason in why, why
    assert why in prog.search.explain()


@pytest.mark.parametrize("dtype, n, nc, blocks", [("float32", 32768, 8192, 4), ("float32", 20000, 12288, 2),
                                                  ("float64", 16384, 8192, 2), ("float64", 30000, 8192, 4)])
def test_one_pass_over_a_cluster_where_rows_do_not_fit_a_block(dtype, n, nc, blocks):
    """Rows longer than a block's registers hold: the strip split over the blocks of a
    thread-block cluster (the smallest cluster of the narrowest tiles that cover the row)."""
    prog = _search(None, n, dtype)
    assert len(prog.kernels) == 1, prog.describe()
    k, L = prog.plan.kernels[0], prog.kernels[0].launch
    assert [kc.variant.name for kc in k.calls] == ["cluster", "cluster"]
    assert (k.calls[0].macro("NC"), k.calls[0].macro("C"), L.cluster) == (nc, blocks, blocks)
    assert blocks * nc // 2 < n <= blocks * nc      # no smaller cluster of these tiles covers the row
    why = prog.search.one_pass(frozenset({0, 1}))
    R = k.calls[0].macro("R")
    assert why.startswith(f"one pass: the reduction over j of c0 (t = gemv(A, x)) completes within a cluster of "
                          f"{blocks} blocks of {L.threads} threads (rows of {n} fit a strip of {R} x {nc} per block, "
                          f"{blocks} blocks)"), why
    # the row's tiles are counted in whole clusters: a block group is one cluster
    count = next(g for g in L.args if g.kind == "count" and g.name == "n_j")
    assert count.count({0: n}) == blocks and L.counts({0: n})[1] == blocks
    assert uncovered_at(prog.kernels, {0: n}) is None
    assert uncovered_at(prog.kernels, {0: blocks * nc + 1}) == (f"kernel {L.kernel} reads rows of {blocks * nc + 1} entries "
                                                    f"in strips of {nc} x {blocks} blocks")


def test_cluster_kernel_reads_like_the_strip_kernel_with_cluster_barriers():
    src = _search(None, 16384, "float64").cuda_source
    body = src[src.index("k0_gemv_gemtv("):]
    head = src[src.rindex("extern", 0, src.index("k0_gemv_gemtv(")):src.index("k0_gemv_gemtv(")]
    assert "__cluster_dims__(2, 1, 1)" in head
    assert "__syncthreads()" not in body
    # one cluster barrier per strip (the warp partials change hands), one before the blocks leave
    assert body.count("kf_cluster_sync();") == 2
    assert body.index("kf_cluster_sync();") < body.index("gemv_cfinish<8, 1, 8192>(")
    assert body.rindex("kf_cluster_sync();") > body.index("svec_add_store<")
    assert "& ~2;" in body                       # no row bands: a cluster's blocks share their strips
    assert "static constexpr int blocks = 2;" in src    # the partials' view: a copy per block


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clusters_only_where_no_block_holds_the_rows(dtype):
    """Where a strip of one block fits, no cluster implementation is ranked (their barriers cost
    more and are not calibrated); on a GPU without clusters, rows longer than a block's take two
    kernels."""
    s = _search(None, 8192, dtype).search
    assert all(code.launch.cluster == 1 for impls in s.ranked.values() for _, _, code in impls)
    lib = kfuse.load_library()
    p = _program(lib, ATAX.read_text())
    s = PlanSearch(p, lib, sizes={"n": 16384 if dtype == "float64" else 32768},
                   itemsize=4 if dtype == "float32" else 8, clusters=False)
    assert len(s.best().kernels) == 2


def test_strips_for_every_call_of_a_kernel_or_none(lib):
    """BiCGK's products share A but use no reduction result: strips are plain implementations
    there (a strip kernel reads A at the copy bandwidth), for both calls of a kernel or neither
    (they walk the same strips); in ATAX's one-pass kernel, only strips."""
    bicgk = next(p for p in EXAMPLES if p.stem == "bicgk")
    s = kfuse.compile(bicgk, tuned=False).search
    kinds = {calls: {tuple(bool(kc.variant.whole) for kc in code.spec.calls) for _, code in impls}
             for calls, impls in s.space.impls.items()}
    assert kinds[frozenset({0, 1})] >= {(True, True), (False, False)}
    assert not any(len(set(k)) > 1 for ks in kinds.values() for k in ks)
    atax = kfuse.compile(next(p for p in EXAMPLES if p.stem == "atax"), tuned=False, sizes={"n": 4096}).search
    assert all(kc.variant.whole for _, code in atax.space.impls[frozenset({0, 1})] for kc in code.spec.calls)


def test_size_class_plan_replanned_when_its_strips_are_too_narrow():
    prog = _search(None, 4096)
    assert prog.plan.kernels[0].calls[0].macro("NC") == 4096
    other = prog.for_sizes({0: 4097})          # the same size class (2^12), a longer row
    assert other is not prog and uncovered_at(other.kernels, {0: 4097}) is None
    assert other.plan.kernels[0].calls[0].macro("NC") == 8192
    assert uncovered_at(prog.kernels, {0: 4097}) == "kernel k0_gemv_gemtv reads rows of 4097 entries in strips of 4096"
    pinned = prog.with_plan(prog.plan)
    with pytest.raises(LaunchError, match="the given plan cannot run at these sizes: kernel k0_gemv_gemtv "
                                          "reads rows of 4097 entries in strips of 4096"):
        pinned.for_sizes({0: 4097})


def test_row_sums_on_strips_need_no_clear():
    """A gemv on strips completes each row in one instance and stores it once: its output is not
    cleared (no fill before the kernel); a gemtv on strips adds column partials from every block:
    cleared.  Off strips both are cleared."""
    gemv = "matrix A; vector x, y; input A, x; y = gemv(A, x); return y;"
    strip = kfuse.compile(gemv, sizes={"A.rows": 8192, "A.cols": 8192}, tuned=False)
    assert "strip" in strip.plan.summary() and strip.kernels[0].launch.clears == ()
    assert "cleared first" not in strip.describe()
    for p in strip.search.plans():
        if "wide" in p.summary():
            assert [v.name for v, _ in strip.with_plan(p).kernels[0].launch.clears] == ["y"]
            break
    atax = kfuse.compile(EXAMPLES[0].parent / "atax.kf", sizes={"n": 8192}, tuned=False)
    assert [v.name for k in atax.kernels for v, _ in k.launch.clears] == ["y"]


@pytest.mark.parametrize("n, nc, scale", [(8192, 8192, 1.0), (4096, 4096, 1.0), (1000, 1024, 1.0),
                                          (4097, 8192, 1.0), (6000, 8192, 1.0), (12000, 16384, 2.0),
                                          (16384, 16384, 2.0)])
def test_strips_priced_as_whole_strips_of_their_width(n, nc, scale):
    """The calibrated model prices a strip by its probes (run on the calibration's 8192 x 8192
    matrix), scaled by its width over the part of it inside that matrix -- not by the columns its
    rows fill: a strip of 8192 over rows of 4097 runs closer to a whole strip's time than to half
    of it (docs/design.md, 'Strips, clusters and bands': priced by the rows, the chosen strips ran up to 1.4x
    slower)."""
    prog = _search(None, n)
    code, model = prog.kernels[0], prog.search.model
    assert code.launch.axis_extent[1] == nc
    assert model._strip_scale(code.launch, code.spec, prog.search.dims) == scale
    if n == 6000:   # the 8192-wide strip's price per strip at 8192 rows of 8192, for fewer strips
        full = _search(None, 8192)
        t = lambda p: p.search.model.kernel_parts(p.kernels[0], p.search.dims, 4)["transfer"]  # noqa: E731
        assert t(prog) == pytest.approx(t(full) * 6000 / 8192, rel=0.02)


def test_strips_wider_than_the_calibration_take_the_probe_of_its_width():
    """A 16384-wide strip's routines are priced from the probe of the 8192-wide strip (all in
    bounds on the calibration's matrix), scaled by 2; the 16384-wide probe ran half its row out of
    bounds at half the loads per thread and priced the strip 3.5 % over its measure, so float32 q =
    A p at 16384 took the wide gemv (352.6 us) over the strip (348.7; now chosen: 341.4 against
    353.8; docs/experiments.md).  Narrower strips keep their own probes."""
    gemv = "matrix A[n, n]; vector p[n], q[n]; input A, p; q = gemv(A, p); return q;"
    prog = kfuse.compile(gemv, tuned=False, sizes={"n": 16384})
    (kc,), model = prog.plan.kernels[0].calls, prog.search.model
    assert kc.variant.name == "strip" and dict(kc.macros)["NC"] == 16384, prog.describe()
    assert dict(model._probed_macros(kc))["NC"] == 8192
    assert {k: v for k, v in model._probed_macros(kc) if k != "NC"} == {k: v for k, v in kc.macros if k != "NC"}
    (narrow,) = kfuse.compile(gemv, tuned=False, sizes={"n": 8192}).plan.kernels[0].calls
    assert narrow.variant.name == "strip" and model._probed_macros(narrow) == narrow.macros
    cluster = kfuse.compile(ATAX, dtype="float64", tuned=False, sizes={"n": 16384})
    for k in cluster.plan.kernels:
        for c in k.calls:
            assert cluster.search.model._probed_macros(c) == c.macros     # clusters: transfer model


def test_wide_strip_without_its_probe_is_priced_by_the_transfer_model():
    """Whether a calibration measured a kernel and which probe prices it are one key
    (``_probe_key``): a calibration lacking the 8192-wide strip's probes prices the 16384-wide strip
    by the transfer model, as any unmeasured strip kernel, rather than failing on the missing key."""
    from dataclasses import replace
    from kfuse.cost.calibrated import CalibratedModel, transfer_kernel_time
    gemv = "matrix A[n, n]; vector p[n], q[n]; input A, p; q = gemv(A, p); return q;"
    prog = kfuse.compile(gemv, tuned=False, sizes={"n": 16384})
    code, model = prog.kernels[0], prog.search.model
    cal = replace(model.cal, routines={k: v for k, v in model.cal.routines.items() if "NC=8192" not in k})
    dims = prog.search.dims
    entries = entries_of(prog.program, dims)
    assert CalibratedModel(cal).kernel_time(code, dims, entries, 4) == transfer_kernel_time(code, dims, entries, 4)
    assert model.kernel_time(code, dims, entries, 4) != transfer_kernel_time(code, dims, entries, 4)


def test_wide_strips_planned_at_16384_build_without_spills(nvcc, tmp_path):
    """The float32 plans the in-bounds pricing moved onto 16384-wide strips (a lone gemv, CG's
    step, SGEMVT, GEMVER), in one module, built by nvcc with spills as errors."""
    from kfuse.tuning.measure import share_module
    cg = ("matrix A; vector x, r, p, q, x1, r1, p1; scalar rr, pq, al, rr1; input A, x, r, p, rr; "
          "q = gemv(A, p); pq = dot(p, q); al = rr / pq; x1 = axpy(al, p, x); r1 = axpy(-al, q, r); "
          "rr1 = dot(r1, r1); p1 = axpy(rr1 / rr, p, r1); return x1, r1, p1, rr1;")
    texts = [cg, (EXAMPLES[0].parent / "sgemvt.kf").read_text(), (EXAMPLES[0].parent / "gemver.kf").read_text()]
    progs = []
    for m, text in enumerate(texts):
        base = kfuse.compile(text, tuned=False)
        prog = base.for_sizes({d.id: d.literal or 16384 for d in base.program.dims})
        assert any(dict(kc.macros).get("NC") == 16384 for k in prog.plan.kernels for kc in k.calls), prog.describe()
        progs.append(prog.with_plan(renamed(prog.plan, str(m))))
    nvcc_compile(nvcc, share_module(progs, "16384-wide strips")[0], tmp_path, "wide", spills=True)


def test_strip_grid_is_one_resident_wave():
    code = _search(None, 8192).kernels[0]
    L = code.launch
    assert L.whole_entries > 0
    iters = L.iterations({0: 8192}, 2 * 132 * (2048 // L.threads))
    assert L.grid({0: 8192}, iters) <= 132


def test_generated_one_pass_kernel_reads_like_the_hand_written_one():
    src = _search(None, 8192).cuda_source
    body = src[src.index("k0_gemv_gemtv("):]
    assert body.count("__syncthreads()") == 1
    assert "(it & 1) * " in body                 # this strip's copy of the warp partials
    assert "kf_smem[" in body
    # A loaded once per strip, t never stored: one load of A, the y partials added after the loop
    assert body.count("stile_load<") == 1 and "srowvec_store" not in body
    assert body.index("svec_add_store<") > body.index("after the serial loop")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 31, 33, 1000, 4097, 8192, 12289, 16384, 20001, 32768])
def test_one_pass_module_compiles(nvcc, tmp_path, dtype, n):
    nvcc_compile(nvcc, kfuse.compile(ATAX, dtype=dtype, tuned=False, sizes={"n": n}).cuda_source, tmp_path,
                 spills=True)


# ---- library metadata ------------------------------------------------------------------------
STRIP = '''
[[function]]
name = "rowdot"
kind = "map-reduce"
params = [
  { name = "A", type = "matrix", dir = "in", index = ["i", "j"] },
  { name = "x", type = "vector", dir = "in", index = ["j"] },
  { name = "out", type = "vector", dir = "out", index = ["i"], reduce = "sum" },
]
[[function.variant]]
name = "strip"
source = "blas2_strip.cu"
threads = [32, "BY"]
TILE
WHOLE
MACROS
locals = [ { name = "part", element = "tile", shape = ["R", "BY"]BUFFERS } ]
routines = [
  { name = "load_A", fn = "stile_load", args = ["&A", "A:w:srows"] },
  { name = "load_x", fn = "svec_load", args = ["&x", "x:w:svec"] },
  { name = "compute_partial", fn = "gemv_spartial", args = ["A:r:srows", "x:r:svec", "part:w:any"] },
  { name = "compute_finish", fn = "gemv_sfinish", args = ["part:r:any", "out:acc:bcast"] },
  { name = "store_out", fn = "srowvec_store", args = ["out:r:bcast", "&out"] },
]
'''


def _load(tmp_path, tile='tile = ["R", "NC"]', whole='whole = ["j"]', buffers=", buffers = 2",
          macros="macros = { BY = [8], R = [1], NC = [1024] }"):
    from pathlib import Path
    import shutil
    shipped = Path(kfuse.__file__).parent / "blas" / "blas2_strip.cu"
    d = tmp_path / "mylib"
    d.mkdir(exist_ok=True)
    shutil.copy(shipped, d / "blas2_strip.cu")
    (d / "mine.toml").write_text(STRIP.replace("TILE", tile).replace("WHOLE", whole).replace("BUFFERS", buffers)
                                 .replace("MACROS", macros))
    return kfuse.load_library(d, shipped=False)


CLUSTER_MACROS = "macros = { BY = [8], R = [1], NC = [1024], C = [2] }"


def test_metadata_cluster_loads(tmp_path):
    """A cluster macro is a choice like any other, but not a template parameter of the routines
    (the strip routines serve the cluster variant as they are)."""
    var = _load(tmp_path, whole='whole = ["j"]\ncluster = "C"', macros=CLUSTER_MACROS).functions[0].variants[0]
    assert var.cluster == "C" and var.template_macros == ("BY", "R", "NC") and var.macros["C"] == (2,)


def test_metadata_strip_loads(tmp_path):
    lib = _load(tmp_path)
    var = lib.functions[0].variants[0]
    assert var.whole == ("j",) and var.locals[0].buffers == 2


@pytest.mark.parametrize("kw, message", [
    ({"tile": ""}, "a variant spanning an axis whole declares its tile = [rows, columns]"),
    ({"whole": 'whole = ["k"]'}, "'k' is not an instance axis (i, j)"),
    ({"whole": 'whole = ["i", "j"]'}, "a tile spanning every axis whole leaves no instances"),
    ({"whole": 'whole = "j"'}, "expected a non-empty list of distinct instance axes"),
    ({"tile": 'tile = ["R", 1024]'}, "the tile side along j is a fixed 1024 entries"),
    ({"buffers": ", buffers = 3"}, "a local has 1 copy or 2"),
    ({"whole": 'whole = ["j"]\ncluster = "Q"'}, "expected the name of one of the variant's macros, got 'Q'"),
    ({"whole": 'cluster = "C"', "macros": CLUSTER_MACROS}, "a cluster spans one axis whole: declare whole"),
    ({"whole": 'whole = ["j"]\ncluster = "C"', "macros": CLUSTER_MACROS.replace("[2]", "[2, 3]")},
     "blocks per cluster must be among [2, 4, 8] (portable cluster sizes), got [3]"),
])
def test_metadata_errors(tmp_path, kw, message):
    with pytest.raises(LibraryError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        _load(tmp_path, **kw)
