"""Vector calls on the rows of strips (issue 18; asked for by ``vector_on_strips=True``, off by
default): a 1-level call (dot, axpy, scal, axpby, vadd) shares a kernel with matrix calls whose
tiles span the rows whole, once per strip on its rows, so a gemv's result is used in its kernel by
a dot or an axpy -- the rule and its reasons, the plans, the generated kernels (compiled by nvcc
for sm_90), the library metadata's validation."""

import pytest

import kfuse
from kfuse.errors import LibraryError
from kfuse.frontend import parse_script
from kfuse.fusion.legality import one_pass_exchanges, why_not
from kfuse.ir.graph import DependencyGraph

from fusion_util import renamed
from test_nvcc import nvcc_compile

# scripts where a vector call uses a gemv's result (or shares its rows), each fused in one kernel
ROWS = {
    "cg_step": "matrix A[n, n]; vector p[n], q[n]; scalar pq; input A, p; q = gemv(A, p); pq = dot(p, q); "
               "return q, pq;",
    "power": "matrix A[n, n]; vector x[n], y[n]; scalar nn; input A, x; y = gemv(A, x); nn = dot(y, y); "
             "return y, nn;",
    "residual": "matrix A[n, n]; vector x[n], b[n], r[n]; scalar rr; input A, x, b; r = gemv(-1.0, A, x, 1.0, b); "
                "rr = dot(r, r); return r, rr;",
    "gemv_axpy": "matrix A[n, n]; vector x[n], z[n], t[n], u[n]; scalar a; input A, x, z, a; t = gemv(A, x); "
                 "u = axpy(a, t, z); return u;",
    "gemv_vadd": "matrix A[n, n]; vector x[n], z[n], t[n], u[n]; input A, x, z; t = gemv(A, x); u = vadd(t, z); "
                 "return t, u;",
    "atax_dot": "matrix A[n, n]; vector x[n], t[n], y[n]; scalar tt; input A, x; t = gemv(A, x); y = gemtv(A, t); "
                "tt = dot(t, t); return y, tt;",
    "scaled_atax": "matrix A[n, n]; vector x[n], t[n], s[n], y[n]; scalar a; input A, x, a; t = gemv(A, x); "
                   "s = scal(a, t); y = gemtv(A, s); return y;",
    "rect": "matrix A[m, n]; vector x[n], z[m], t[m], w[m]; scalar b; input A, x, z, b; t = gemv(A, x); "
            "w = axpby(b, t, -1.0, z); return w;",
}


def fused(prog) -> bool:
    """One kernel, every call on strips, the vector calls on the strips' rows."""
    (k,) = prog.plan.kernels
    return all(kc.variant.whole for kc in k.calls) and any(kc.on_rows for kc in k.calls)


def test_rule_allows_a_dot_of_a_gemv_result(lib):
    p = parse_script(ROWS["cg_step"], lib)
    g = DependencyGraph(p)
    assert why_not(p, g, frozenset({0, 1}), on_strips_rows=True) is None
    (prod, cons, v, axes), = one_pass_exchanges(p, g, frozenset({0, 1}))
    assert (prod, cons, v.name, axes) == (0, 1, "q", ("j",))


@pytest.mark.parametrize("script, reason", [
    # a vector along the columns is made by a reduction over every strip: a global barrier
    ("matrix A[n, n]; vector r[n], s[n]; scalar d; input A, r; s = gemtv(A, r); d = dot(s, s); return s, d;",
     "exchanges_on_chip: d = dot(s, s) reads s along i, s = gemtv(A, r) makes it along j: a global barrier"),
    # a vector call's rows must be the matrix's rows
    ("matrix A[m, n]; vector x[n], u[n], t[m]; scalar a; input A, x, a; u = scal(a, x); t = gemv(A, u); return t;",
     "same_instances: u = scal(a, x) walks n instances, t = gemv(A, u) walks mxn"),
    # a gemv reading what a vector call makes: it needs all of it in every strip
    ("matrix A[n, n]; vector u[n], v[n], y[n]; scalar a; input A, u, a; v = scal(a, u); y = gemv(A, v); return y;",
     "exchanges_on_chip: y = gemv(A, v) reads v along j, v = scal(a, u) makes it along i: a global barrier"),
])
def test_rule_refusals(lib, script, reason):
    p = parse_script(script, lib)
    assert str(why_not(p, DependencyGraph(p), frozenset({0, 1}), on_strips_rows=True)) == reason


def test_unrelated_vector_calls_stay_off_the_strips(lib):
    """A vector call sharing no value with the matrix calls gains nothing on the strips' rows (a
    few threads per strip instead of the GPU's width; measured 0.96x): refused with the reason,
    and the plan keeps it out of the strip kernel; one linked through another vector call joins."""
    text = ("matrix A[n, n]; vector x[n], t[n], u[n], z[n], w[n]; scalar d, a; input A, x, z, a; "
            "t = gemv(A, x); d = dot(t, x); u = axpy(a, x, z); w = scal(a, z); return d, u, w;")
    p = parse_script(text, lib)
    g = DependencyGraph(p)
    assert why_not(p, g, frozenset({0, 1}), on_strips_rows=True) is None
    assert str(why_not(p, g, frozenset({0, 2}), on_strips_rows=True)) == (
        "same_nesting: u = axpy(a, x, z) shares no value with the matrix calls on strips it would join (a vector "
        "call runs on the strips' rows only to use or feed what they compute)")
    assert why_not(p, g, frozenset({0, 1, 2, 3}), on_strips_rows=True) is not None
    prog = kfuse.compile(text, tuned=False, sizes={"n": 8192}, vector_on_strips=True)
    strip = next(k for k in prog.plan.kernels if any(kc.variant.whole for kc in k.calls))
    assert {kc.call.function.name for kc in strip.calls} == {"gemv", "dot"}, prog.describe()
    linked = parse_script("matrix A[n, n]; vector x[n], t[n], s[n], u[n]; scalar a; input A, x, a; "
                          "t = gemv(A, x); s = scal(a, t); u = vadd(s, x); return u;", lib)
    assert why_not(linked, DependencyGraph(linked), frozenset({0, 1, 2}), on_strips_rows=True) is None


@pytest.mark.parametrize("dtype, n", [("float32", 16384), ("float32", 8192), ("float64", 4096)])
def test_column_sums_on_strips_loop_along_the_rows(dtype, n):
    """A strip kernel holding a gemtv (column sums added once per block when its loop ends) loops
    along i: along j each block would take one strip and add a whole row per strip (float32 ATAX
    + dot at 16384, planned so before: 645.9 us against 354.5)."""
    prog = kfuse.compile(ROWS["atax_dot"], dtype=dtype, tuned=False, sizes={"n": n}, vector_on_strips=True)
    strips = [k for _, plan in zip(range(40), prog.search.plans()) for k in plan.kernels
              if any(kc.variant.whole for kc in k.calls) and any(kc.call.function.name == "gemtv" for kc in k.calls)]
    assert strips and all(k.loop == "i" for k in strips), prog.describe()


@pytest.mark.parametrize("name", sorted(ROWS))
@pytest.mark.parametrize("dtype, n", [("float32", 8192), ("float64", 4096), ("float32", 1000)])
def test_one_kernel_where_rows_fit(name, dtype, n):
    sizes = {"m": 1000, "n": n} if name == "rect" else {"n": n}
    prog = kfuse.compile(ROWS[name], dtype=dtype, tuned=False, sizes=sizes, vector_on_strips=True)
    assert fused(prog), prog.describe()
    assert "one pass" in prog.search.explain() or name == "power"


def test_off_by_default_with_the_reason(lib):
    """Without vector_on_strips the rule refuses, saying how to ask for it; the plan is two kernels."""
    p = parse_script(ROWS["cg_step"], lib)
    assert str(why_not(p, DependencyGraph(p), frozenset({0, 1}))) == (
        "same_nesting: nesting depths [1, 2] differ: q = gemv(A, p) walks instances over 2 axes, pq = dot(p, q) "
        "over 1 (a kernel walks one nesting; vector calls on the rows of strips: vector_on_strips=True)")
    prog = kfuse.compile(ROWS["cg_step"], tuned=False, sizes={"n": 8192})
    assert len(prog.kernels) == 2 and not any(kc.on_rows for k in prog.plan.kernels for kc in k.calls)


def test_vector_calls_alone_never_take_strip_variants():
    prog = kfuse.compile("vector x[n], y[n]; scalar d; input x, y; d = dot(x, y); return d;", tuned=False,
                         vector_on_strips=True)
    assert prog.plan.kernels[0].calls[0].variant.name != "strip"
    code = prog.kernels[0]
    assert code.spec.nesting == 1


def test_rows_too_long_take_two_kernels():
    """Rows no block holds (the vector calls have no cluster form): gemv and dot apart."""
    prog = kfuse.compile(ROWS["cg_step"], dtype="float32", tuned=False, sizes={"n": 40000}, vector_on_strips=True)
    assert len(prog.kernels) == 2, prog.describe()
    assert not any(kc.on_rows for k in prog.plan.kernels for kc in k.calls)


def test_generated_kernel_reads_q_once_and_adds_the_dot_once_per_block():
    src = kfuse.compile(ROWS["cg_step"], tuned=False, sizes={"n": 8192}, vector_on_strips=True).cuda_source
    body = src[src.index("k0_gemv_dot("):]
    assert body.count("stile_load<") == 1 and body.count("dot_rows<") == 1
    assert body.index("rows_dot_store<") > body.index("after the serial loop")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_fused_implementation_compiles(nvcc, tmp_path, name, dtype):
    """Every implementation of the fused kernel the search keeps at n = 1000 and 4097 (both loop
    axes, strips of 1 or 2 rows, 256 or 512 threads), in one module per size, built by nvcc."""
    from kfuse.tuning.measure import share_module
    for n in (1000, 4097):
        sizes = {"m": 33, "n": n} if name == "rect" else {"n": n}
        base = kfuse.compile(ROWS[name], dtype=dtype, tuned=False, sizes=sizes, vector_on_strips=True)
        full = frozenset(range(len(base.program.calls)))
        impls = base.search.ranked[full]
        loops = {impl.loop for _, impl, _ in impls}
        # column sums on strips (gemtv) loop along i only (choices.loops_of)
        assert loops == {"i"} if "gemtv" in ROWS[name] else loops
        progs = [base.with_plan(renamed(base.search.plan((full,), (m,)), f"v{m}")) for m in range(len(impls))]
        nvcc_compile(nvcc, share_module(progs, f"{name} n={n}")[0], tmp_path, f"{name}_{n}")


# ---- library metadata ------------------------------------------------------------------------
ROW_FN = '''
[[function]]
name = "twice"
kind = "map"
params = [
  { name = "x", type = "vector", dir = "in", index = ["i"] },
  { name = "out", type = "vector", dir = "out", index = ["i"] },
]
[[function.variant]]
name = "strip"
source = ["blas2_strip.cu", "blas1_rows.cu"]
threads = [32, "BY"]
TILE
WHOLE
macros = { BY = [8], R = [1], NC = [1024] CMACRO }
routines = [
  { name = "load_x", fn = "srowvec_load", args = ["&x", "x:w:bcast"] },
  { name = "compute", fn = "vadd_rows", args = ["x:r:bcast", "x:r:bcast", "out:w:bcast"] },
  { name = "store_out", fn = "srowvec_store", args = ["out:r:bcast", "&out"] },
]
'''


def _load(tmp_path, tile='tile = ["R", "NC"]', whole='whole = ["j"]', cmacro=""):
    import shutil
    from pathlib import Path
    shipped = Path(kfuse.__file__).parent / "blas"
    d = tmp_path / "mylib"
    d.mkdir(exist_ok=True)
    for f in ("blas2_strip.cu", "blas1_rows.cu"):
        shutil.copy(shipped / f, d / f)
    (d / "mine.toml").write_text(ROW_FN.replace("TILE", tile).replace("WHOLE", whole).replace("CMACRO", cmacro))
    return kfuse.load_library(d, shipped=False)


def test_metadata_vector_variant_on_strips_loads(tmp_path):
    var = _load(tmp_path).functions[0].variants[0]
    assert var.whole == ("j",) and var.instances_per_block == (1,) and var.tile == ("R", "NC")


@pytest.mark.parametrize("kw, message", [
    ({"whole": 'whole = ["i"]'}, 'a 1-level variant on the rows of strips declares whole = ["j"]'),
    ({"tile": 'tile = ["R", 1024]'}, "a tile whose columns are a macro"),
    ({"tile": ""}, "a variant spanning an axis whole declares its tile"),
    ({"whole": 'whole = ["j"]\ncluster = "C"', "cmacro": ", C = [2]"}, "runs once per strip"),
    ({"whole": ""}, "an unnested function's instance is one row of threads: [X, 1] (but a variant on the rows"),
])
def test_metadata_errors(tmp_path, kw, message):
    with pytest.raises(LibraryError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        _load(tmp_path, **kw)


@pytest.mark.parametrize("seed", [5005, 5060, 5084, 3023, 3099])
def test_asking_for_them_leaves_the_other_candidates_alone(lib, seed):
    """Bounded searches of 10-call scripts: the option adds fusions of vector calls on strips on top
    of the candidates grown without it, and a first plan it changes holds such a kernel."""
    from kfuse.frontend.random_scripts import random_script
    from kfuse.fusion.space import grow_fusions
    text = random_script(lib, seed, calls=10).text
    p = parse_script(text, lib)
    g = DependencyGraph(p)
    off = {f.calls for f in grow_fusions(p, g)[0]}
    on = {f.calls for f in grow_fusions(p, g, on_strips_rows=True)[0]}
    assert off <= on
    assert all(len({p.calls[i].function.nesting for i in f}) == 2 for f in on - off)
    for sizes in (None, {d.name: 1024 for d in p.dims}):
        plain = kfuse.compile(text, tuned=False, sizes=sizes)
        asked = kfuse.compile(text, tuned=False, sizes=sizes, vector_on_strips=True)
        assert asked.plan.summary() == plain.plan.summary() or \
            any(kc.on_rows for k in asked.plan.kernels for kc in k.calls)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [4096, 8192])
def test_planned_kernels_do_not_spill(nvcc, tmp_path, n, dtype):
    """The planned kernels of every script above, in one module, built by nvcc with spills as
    errors (float64 gemv + axpy at 8192 once planned strips of 2 rows in a loop along i: 255
    registers and 84 bytes spilled, 0.81x the plan without vector calls on strips)."""
    from kfuse.tuning.measure import share_module
    progs = []
    for m, (name, text) in enumerate(sorted(ROWS.items())):
        sizes = {"m": n, "n": n} if name == "rect" else {"n": n}
        prog = kfuse.compile(text, dtype=dtype, tuned=False, sizes=sizes, vector_on_strips=True)
        progs.append(prog.with_plan(renamed(prog.plan, name)))
    nvcc_compile(nvcc, share_module(progs, f"planned on strips n={n}")[0], tmp_path, spills=True)


@pytest.mark.parametrize("dtype, n, bands", [
    ("float32", 1024, False), ("float32", 8192, False), ("float32", 16384, False), ("float32", 32768, True),
    ("float64", 4096, False), ("float64", 8192, False), ("float64", 16384, True), ("float64", 32768, True)])
def test_row_bands_only_where_no_strip_fits_and_first_at_float64_16384(dtype, n, bands, nvcc, tmp_path):
    """A gemv's `band` variant is its `strip` variant's fallback: ranked only at sizes whose rows no
    strip holds (float32 above 16384 entries, float64 above 8192: the widest strip spills), where
    they read A faster than the 32-row `wide` tiles (float64 16384: 676.4 us against 702.1, H100,
    docs/experiments.md, row bands); the shipped calibration puts one first there."""
    gemv = "matrix A; vector x, y; input A, x; y = gemv(A, x); return y;"
    base = kfuse.compile(gemv, dtype=dtype, tuned=False)
    prog = base.for_sizes({d.id: n for d in base.program.dims})
    [(calls, ranked)] = [(c, r) for c, r in prog.search.ranked.items() if len(c) == 1]
    names = {code.spec.calls[0].variant.name for _, _, code in ranked}
    assert ("band" in names) == bands and ("strip" in names) != bands, names
    if (dtype, n) == ("float64", 16384):
        assert prog.plan.kernels[0].calls[0].variant.name == "band", prog.plan.summary()
        nvcc_compile(nvcc, prog.cuda_source, tmp_path, "band", spills=True)


def test_explain_says_why_a_band_stands_in_for_the_strip():
    base = kfuse.compile("matrix A; vector x, y; input A, x; y = gemv(A, x); return y;", dtype="float64", tuned=False)
    text = base.for_sizes({d.id: 16384 for d in base.program.dims}).search.explain()
    assert "y = gemv(A, x): band, standing in for strip: its elements take" in text and "would spill" in text
    base32 = kfuse.compile("matrix A; vector x, y; input A, x; y = gemv(A, x); return y;", tuned=False)
    text = base32.for_sizes({d.id: 32768 for d in base32.program.dims}).search.explain()
    assert "band, standing in for strip: rows of 32768 do not fit a strip of 16384" in text
    assert "standing in" not in base32.search.explain()      # n = 8192: a strip fits, no band
