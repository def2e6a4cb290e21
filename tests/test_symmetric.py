"""symv and trmv on the upper triangle (variant field ``triangle = "upper"``), and vmul (diagonal
scaling) on the CPU: the library fields and their errors, the reference expressions, the
numbering of the upper tiles, the plans (a call on a triangle runs alone; vmul fuses like the
other BLAS-1 maps), the prices, and the generated CUDA built by nvcc.  On the GPU:
test_gpu_symmetric.py."""
import shutil

import numpy as np
import pytest

import kfuse
from kfuse.errors import KfuseError, LibraryError, ScriptError
from kfuse.ir.kernel import upper_tiles
from kfuse.library.expr import ExprError, evaluate, check
from kfuse.reference import evaluate as reference

from fusion_util import renamed
from test_nvcc import nvcc_compile

SYMV_DOT = """matrix A[n, n]; vector p[n], q[n]; scalar pq; input A, p;
q = symv(A, p); pq = dot(p, q); return q, pq;"""
TRMV = "matrix A[n, n]; vector x[n], y[n]; input A, x; y = trmv(A, x); return y;"
GEMV = "matrix A[n, n]; vector x[n], y[n]; input A, x; y = gemv(A, x); return y;"
SYMV = "matrix A[n, n]; vector x[n], y[n]; input A, x; y = symv(A, x); return y;"
# a Jacobi step x1 = x + D^-1 (b - A x), the inverse diagonal given as dinv
JACOBI = """matrix A[n, n]; vector x[n], b[n], dinv[n], ax[n], r[n], z[n], x1[n]; input A, x, b, dinv;
ax = gemv(A, x); r = axpy(-1, ax, b); z = vmul(dinv, r); x1 = axpy(1, z, x); return x1;"""
# preconditioned CG's vector work around a symmetric product
PCG = """matrix A[n, n]; vector p[n], r[n], dinv[n], q[n], z[n]; scalar pq, rz; input A, p, r, dinv;
q = ssymv(A, p); pq = dot(p, q); z = diagscal(dinv, r); rz = dot(r, z); return q, pq, z, rz;"""


# ---- the library ---------------------------------------------------------------------------
def test_shipped_functions(lib):
    for name in ("symv", "trmv"):
        [fn] = lib.overloads(name)
        assert fn.triangle == "upper" and all(v.tile == ("S", "S") for v in fn.variants)
    [vmul] = lib.overloads("vmul")
    assert lib.overloads("diagscal") == (vmul,)
    assert [v.name for v in vmul.variants] == ["warp", "quad", "strip"] and vmul.triangle is None


SYM_FN = '''
[[function]]
name = "mysymv"
kind = "map-reduce"
reference = "np.triu(A) @ x"
params = [
  { name = "A", type = "matrix", dir = "in", index = ["i", "j"] },
  { name = "x", type = "vector", dir = "in", index = ["j"] },
  { name = "out", type = "vector", dir = "out", index = ["i"], reduce = "sum" },
]
[[function.variant]]
name = "quad"
source = "blas2_sym.cu"
threads = [8, "BY"]
TILE
TRIANGLE
macros = { BY = [8], S = [32] }
routines = [
  { name = "load_A", fn = "utile_load", args = ["&A", "A:w:qrows"] },
  { name = "load_x", fn = "ux_load", args = ["&x", "x:w:quad"] },
  { name = "compute", fn = "trmv_ucompute", args = ["A:r:qrows", "x:r:quad", "out:acc:rowpart"] },
  { name = "store_out", fn = "urowsum_store", args = ["out:r:rowpart", "&out"] },
]
'''


def _load(tmp_path, tile='tile = ["S", "S"]', triangle='triangle = "upper"', extra=""):
    d = tmp_path / "mylib"
    d.mkdir(exist_ok=True)
    shutil.copy(kfuse.load_library().root / "blas2_sym.cu", d / "blas2_sym.cu")
    (d / "mine.toml").write_text(SYM_FN.replace("TILE", tile).replace("TRIANGLE", triangle) + extra)
    return kfuse.load_library(d, shipped=False)


def test_metadata_on_a_triangle_loads(tmp_path):
    var = _load(tmp_path).functions[0].variants[0]
    assert var.triangle == "upper" and var.tile == ("S", "S")


@pytest.mark.parametrize("kw, message", [
    ({"triangle": 'triangle = "lower"'}, "'lower' is not one of 'upper'"),
    ({"triangle": 'triangle = 1'}, "triangle"),
    ({"tile": 'tile = ["S", 32]'}, "a triangle's tiles are square"),
    ({"tile": 'tile = [32, 64]'}, "a triangle's tiles are square"),
    ({"triangle": 'triangle = "upper"\nwhole = ["j"]', "tile": 'tile = ["S", "S"]'}, "no whole, cluster or fallback"),
])
def test_metadata_errors(tmp_path, kw, message):
    with pytest.raises(LibraryError, match=message):
        _load(tmp_path, **kw)


def test_variants_of_a_function_walk_the_same_tiles(tmp_path):
    second = SYM_FN.split("[[function.variant]]")[1].replace('name = "quad"', 'name = "other"')
    with pytest.raises(LibraryError, match="every variant walks the same tiles"):
        _load(tmp_path, extra="[[function.variant]]" + second.replace("TILE", 'tile = ["S", "S"]')
              .replace("TRIANGLE", ""))


def test_a_load_may_write_locals_but_nothing_else(tmp_path):
    # symv's load of x writes x along j and the local xi along i
    lib = kfuse.load_library()
    [symv] = lib.overloads("symv")
    load_x = symv.variants[0].routine("load_x")
    assert [a.name for a in load_x.elements] == ["x", "xi"]
    bad = SYM_FN.replace('args = ["&x", "x:w:quad"]', 'args = ["&x", "x:w:quad", "out:w:rowpart"]')
    d = tmp_path / "bad"
    d.mkdir()
    shutil.copy(lib.root / "blas2_sym.cu", d / "blas2_sym.cu")
    (d / "mine.toml").write_text(bad.replace("TILE", 'tile = ["S", "S"]').replace("TRIANGLE", 'triangle = "upper"'))
    with pytest.raises(LibraryError, match="a load: first, then locals it writes"):
        kfuse.load_library(d, shipped=False)


# ---- reference expressions -----------------------------------------------------------------
def test_triu_in_references():
    A = np.arange(16.0).reshape(4, 4)
    x = np.arange(4.0) + 1
    got = evaluate("np.triu(A) @ x + np.triu(A, 1).T @ x", {"A": A, "x": x}, "reference")
    U = np.triu(A)
    assert np.array_equal(got, (U + np.triu(A, 1).T) @ x)
    with pytest.raises(ExprError, match="np.triu takes a matrix"):      # no n x n matrix from a vector
        evaluate("np.triu(x)", {"x": x}, "reference")
    for bad in ("np.triu(A, 99)", "np.triu(A, x)", "np.triu(A, 1, 2)", "np.tril(A)"):
        with pytest.raises(ExprError):
            check(bad, {"A", "x"}, "reference")


def test_symv_reference_reads_only_the_upper_triangle(lib):
    prog = kfuse.compile(SYMV, tuned=False, sizes={"n": 37})
    rng = np.random.default_rng(1)
    A = rng.standard_normal((37, 37))
    x = rng.standard_normal(37)
    poisoned = A.copy()
    poisoned[np.tril_indices(37, -1)] = np.nan
    sym = np.triu(A) + np.triu(A, 1).T
    [y] = prog.program.outputs
    assert np.allclose(reference(prog.program, {"A": poisoned, "x": x})[y.id], sym @ x)


# ---- the upper tiles -----------------------------------------------------------------------
@pytest.mark.parametrize("T", [1, 2, 3, 7, 33, 257, 2049])
def test_upper_tiles_number_every_upper_tile_once_row_by_row(T):
    P = T * (T + 1) // 2
    i, j = upper_tiles(np.arange(P), T)
    assert (i <= j).all() and len(set(zip(i.tolist(), j.tolist()))) == P
    assert (np.diff(i) >= 0).all()                  # row by row, each row left to right
    assert upper_tiles(0, T) == (0, 0) and upper_tiles(P - 1, T) == (T - 1, T - 1)


@pytest.mark.parametrize("n", [1, 33, 1000, 8192])
def test_launch_walks_only_the_upper_tiles(n):
    prog = kfuse.compile(SYMV, tuned=False, sizes={"n": n})
    [code] = prog.kernels
    L = code.launch
    dims = {d.id: n for d in prog.program.dims}
    T = L.counts(dims)[0]
    assert L.triangle and L.instances(dims) == T * (T + 1) // 2
    iters = L.iterations(dims, 2112)
    assert L.grid(dims, iters) * iters >= L.instances(dims) > L.grid(dims, iters) * iters - iters


# ---- plans -----------------------------------------------------------------------------------
def test_a_call_on_a_triangle_runs_alone(lib):
    prog = kfuse.compile(SYMV_DOT, tuned=False)
    assert [[kc.call.function.name for kc in k.calls] for k in prog.plan.kernels] == [["symv"], ["dot"]]
    text = prog.search.explain()
    assert "symv" in text
    src = prog.cuda_source
    assert "n_tri = n_i * (n_i + 1) / 2" in src and "kf_t >= n_tri" in src


def test_trmv_and_symv_with_gemv_on_one_matrix_stay_apart(lib):
    script = """matrix A[n, n]; vector x[n], y[n], t[n], g[n]; input A, x;
    y = symv(A, x); t = trmv(A, x); g = gemv(A, x); return y, t, g;"""
    prog = kfuse.compile(script, tuned=False)
    assert len(prog.plan.kernels) >= 3
    assert "walks only the upper triangle's tiles" in prog.search.explain()


def test_a_triangle_needs_a_square_matrix():
    script = "matrix A[n, m]; vector x[m], y[n]; input A, x; y = symv(A, x); return y;"
    with pytest.raises(ScriptError, match="symv reads a triangle of a square matrix"):
        kfuse.compile(script, tuned=False)


def test_vmul_fuses_with_vector_work():
    prog = kfuse.compile(JACOBI, tuned=False)
    names = [[kc.call.function.name for kc in k.calls] for k in prog.plan.kernels]
    assert names == [["gemv"], ["axpy", "vmul", "axpy"]]
    on_strips = kfuse.compile(JACOBI, tuned=False, vector_on_strips=True)
    assert [[kc.call.function.name for kc in k.calls] for k in on_strips.plan.kernels] == \
        [["gemv", "axpy", "vmul", "axpy"]]


def test_symv_is_priced_below_a_gemv():
    """The shipped calibration measured symv's routines: its kernel, reading the upper tiles of the
    matrix only, is priced well below a gemv of the same size (and above the half of it that its
    traffic alone would give: the mirrored tiles cost more than a plain tile)."""
    symv = kfuse.compile(SYMV, tuned=False).plan.predicted
    gemv = kfuse.compile(GEMV, tuned=False).plan.predicted
    assert 0.35 * gemv < symv < 0.8 * gemv


def test_a_calibration_without_symvs_routines_prices_it_by_the_transfer_model(lib):
    """The shipped H100 calibration measured symv's and vmul's routines; one without symv's (as
    carried over from a library before it) prices its kernel by the transfer model."""
    from dataclasses import replace
    from kfuse.cost.calibrated import CalibratedModel
    from kfuse.cost.store import find
    from kfuse.cost.transfer import kernel_time
    exact, other = find("NVIDIA H100 80GB HBM3", lib.digest, "float32")
    cal = exact or other
    assert cal is not None and cal.library == lib.digest
    assert {"vmul(x,y)/quad/-/compute", "vmul(x,y)/quad/-/load_x"} <= set(cal.routines)
    assert any(k.startswith("symv(") for k in cal.routines)
    partial = replace(cal, routines={k: v for k, v in cal.routines.items() if not k.startswith("symv(")})
    prog = kfuse.compile(SYMV, calibration=CalibratedModel(partial), tuned=False)
    [code] = prog.kernels
    dims = {d.id: 8192 for d in prog.program.dims}
    entries = {v.id: int(np.prod([dims[d] for d in v.dims])) for v in prog.program.values}
    assert prog.plan.predicted == pytest.approx(kernel_time(code, dims, entries, 4), rel=1e-2)   # plans round
    measured = kfuse.compile(SYMV, calibration=CalibratedModel(cal), tuned=False)
    assert measured.plan.predicted != pytest.approx(prog.plan.predicted, rel=1e-2)


# ---- the generated CUDA ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("script", [SYMV, TRMV], ids=["symv", "trmv"])
def test_every_implementation_compiles(nvcc, tmp_path, script, dtype):
    """Every implementation the search keeps (BY 8 or 16, tiles of 32 or 64), in one module."""
    from kfuse.tuning.measure import share_module
    base = kfuse.compile(script, dtype=dtype, tuned=False, sizes={"n": 1000})
    full = frozenset(range(len(base.program.calls)))
    impls = base.search.ranked[full]
    assert len(impls) == 4 and {impl.loop for _, impl, _ in impls} == {"i"}
    progs = [base.with_plan(renamed(base.search.plan((full,), (m,)), f"v{m}")) for m in range(len(impls))]
    nvcc_compile(nvcc, share_module(progs, f"tri {dtype}")[0], tmp_path, f"tri_{dtype}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("script, strips", [(SYMV_DOT, False), (PCG, False), (JACOBI, False), (JACOBI, True)],
                         ids=["symv-dot", "pcg", "jacobi", "jacobi-strips"])
def test_scripts_compile(nvcc, tmp_path, script, strips, dtype):
    prog = kfuse.compile(script, dtype=dtype, tuned=False, sizes={"n": 1000}, vector_on_strips=strips)
    nvcc_compile(nvcc, prog.cuda_source, tmp_path, "script", spills=True)


def test_no_row_blocks_of_a_triangle():
    from kfuse.distributed.partition import partition
    prog = kfuse.compile(SYMV, tuned=False)
    with pytest.raises(KfuseError, match="a block of its rows cannot be split off"):
        partition(prog.program, kfuse.load_library(), 2)


def test_calibration_probes_cover_the_new_routines(lib):
    """``kfuse calibrate`` measures symv's, trmv's and vmul's routines like the others' (each in a
    micro-kernel of its own frame; test_calibration builds the probe modules)."""
    from kfuse.calibration.probes import library_probes
    routines, _ = library_probes(lib)
    for key in ("symv(A,x)/quad/BY=8,S=64/load_x", "trmv(A,x)/quad/BY=16,S=32/store_out", "vmul(x,y)/quad/-/compute"):
        assert key in routines
