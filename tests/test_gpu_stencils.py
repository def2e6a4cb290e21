"""Stencils on the GPU (run with -m gpu): each shipped stencil at grids of 1, 2, 33 and 257 per
side (3-D: 1, 2, 33 and 33 x 17 x 5; 2-D up to 257^2) and 257^3 for lap7/lap27 in float64, in both
dtypes, against the float64 NumPy reference (library/expr.py's cross/box, themselves checked
against loops in test_stencils.py) by relative error; fresh random data, outputs given as
NaN-poisoned arrays; fused stencil + dot; grid-shape errors; CG and Jacobi-PCG on 3-D Poisson
problems (examples/solvers/poisson_cg.py) checked with SciPy's matrix (NumPy's reference of the
operator when SciPy is absent)."""
import sys

import numpy as np
import pytest

import kfuse
from kfuse.errors import LaunchError
from kfuse.reference import evaluate, relative_error

from conftest import ROOT

pytestmark = pytest.mark.gpu
TOL = {"float32": 2e-6, "float64": 1e-13}
sys.path.insert(0, str(ROOT / "examples" / "solvers"))

SHAPES_2D = [(1, 1), (2, 2), (33, 33), (257, 257), (17, 33), (5, 257)]
SHAPES_3D = [(1, 1, 1), (2, 2, 2), (33, 33, 33), (5, 17, 33), (33, 17, 5), (3, 1, 257)]


def _case(name, shape, dtype, seed):
    import cupy as cp
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(shape).astype(dtype)
    c = rng.uniform(0.5, 2.0, shape).astype(dtype)
    variable = name.endswith("v")
    script = (f"vector c, u, w;\nscalar s;\ninput c, u;\nw = {name}(c, u);\ns = dot(u, w);\nreturn w, s;\n"
              if variable else
              f"vector u, w;\nscalar s;\ninput u;\nw = {name}(u);\ns = dot(u, w);\nreturn w, s;\n")
    host = {"u": u.astype(np.float64), **({"c": c.astype(np.float64)} if variable else {})}
    dev = {"u": cp.asarray(u), **({"c": cp.asarray(c)} if variable else {})}
    return script, host, dev


def _run_and_check(name, shape, dtype, seed=0):
    import cupy as cp
    script, host, dev = _case(name, shape, dtype, seed)
    prog = kfuse.compile(script, dtype=dtype)
    w = cp.full(shape, np.nan, dtype=dtype)            # poisoned: an unwritten entry shows
    got_w, got_s = prog(out={"w": w}, **dev)
    cp.cuda.Device().synchronize()
    assert got_w is w and got_w.shape == shape
    env = evaluate(prog.program, host)
    mag = evaluate(prog.program, host, magnitude=True)
    wv, sv = prog.program.outputs
    err = relative_error(cp.asnumpy(got_w), env[wv.id], mag[wv.id])
    assert err <= TOL[dtype], f"{name} {shape} {dtype}: w relative error {err:.2e}"
    serr = abs(float(got_s) - float(env[sv.id])) / max(float(mag[sv.id]), 1e-300)
    assert serr <= TOL[dtype] * 10, f"{name} {shape} {dtype}: s relative error {serr:.2e}"
    # results kfuse allocates come back in the grid's shape
    again = prog(**dev)[0]
    assert again.shape == shape and bool(cp.all(again == got_w))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES_2D)
@pytest.mark.parametrize("name", ["lap5", "lap5v"])
def test_2d_stencils(name, shape, dtype):
    _run_and_check(name, shape, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES_3D)
@pytest.mark.parametrize("name", ["lap7", "lap27", "lap7v", "lap27v"])
def test_3d_stencils(name, shape, dtype):
    _run_and_check(name, shape, dtype)


@pytest.mark.parametrize("name", ["lap7", "lap27"])
def test_3d_stencils_at_257_cubed(name):
    _run_and_check(name, (257, 257, 257), "float64")


def test_a_1d_array_for_a_stencil_and_disagreeing_shapes_are_launch_errors():
    import cupy as cp
    prog = kfuse.compile("vector u, r, w, v;\ninput u, r;\nw = lap7(u);\nv = axpy(2, r, w);\nreturn v;\n", dtype="float64")
    with pytest.raises(LaunchError, match=r"lap7 \(line 3\) needs the grid's shape of u"):
        prog(u=cp.ones(60), r=cp.ones(60))
    with pytest.raises(LaunchError, match=r"r has grid shape \(5, 4, 3\), but u has \(3, 4, 5\)"):
        prog(u=cp.ones((3, 4, 5)), r=cp.ones((5, 4, 3)))
    v = prog(u=cp.ones((3, 4, 5)), r=cp.ones(60))       # one grid, one flat: fine
    assert v.shape == (3, 4, 5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jit_stencil_step(dtype):
    import cupy as cp
    rng = np.random.default_rng(3)
    shape = (33, 17, 5)
    p, r = (rng.standard_normal(shape).astype(dtype) for _ in range(2))

    @kfuse.jit
    def step(p, r):
        q = kfuse.lib.lap27(p)
        return r - 0.5 * q, p @ q

    r2, pq = step(cp.asarray(p), cp.asarray(r))
    q = kfuse.lib.lap27(p.astype(np.float64))           # the reference on NumPy grids
    assert r2.shape == shape
    tol = TOL[dtype] * 100
    np.testing.assert_allclose(cp.asnumpy(r2), r - 0.5 * q, rtol=tol, atol=tol * np.abs(q).max())
    assert abs(float(pq) - float((p.astype(np.float64) * q).sum())) <= tol * float(np.abs(p * q).sum())


def _residual(op, x, b):
    try:
        import poisson_cg
        return poisson_cg.check(op, x, b, 1.0)
    except ImportError:                     # no SciPy: the operator's NumPy reference
        Ax = getattr(kfuse.lib, op)(np.asarray(x, dtype=np.float64))
        return float(np.linalg.norm(b - Ax) / np.linalg.norm(b))


@pytest.mark.parametrize("op", ["lap7", "lap27"])
@pytest.mark.parametrize("solver", ["cg", "pcg"])
@pytest.mark.parametrize("shape", [(33, 17, 5), (32, 32, 32)])
def test_poisson_cg_matches_scipy(op, solver, shape):
    import cupy as cp
    import poisson_cg
    rng = np.random.default_rng(5)
    b = rng.standard_normal(shape)
    x, rr, k = getattr(poisson_cg, solver)(cp.asarray(b), op, tol=1e-10)
    cp.cuda.Device().synchronize()
    assert x.shape == shape and 0 < k < 2000
    res = _residual(op, cp.asnumpy(x), b)
    assert res <= 1e-9, f"{solver} {op} {shape}: relative residual {res:.2e} after {k} iterations"
