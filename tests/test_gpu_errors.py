"""Bad arrays are refused with errors that name the argument (run with -m gpu)."""
import numpy as np
import pytest

import kfuse
from kfuse import LaunchError

from conftest import ROOT

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def bicgk():
    return kfuse.compile(ROOT / "examples" / "bicgk.kf", dtype="float32")


@pytest.fixture
def args():
    import cupy as cp
    n, m = 40, 50
    return {"A": cp.random.standard_normal((n, m), dtype=np.float32),
            "p": cp.random.standard_normal(m, dtype=np.float32),
            "r": cp.random.standard_normal(n, dtype=np.float32)}


def test_rectangular_ok(bicgk, args):
    import cupy as cp
    q, s = bicgk(**args, sync=True)
    A, p, r = (cp.asnumpy(args[k]).astype(np.float64) for k in "Apr")
    assert np.linalg.norm(cp.asnumpy(q) - A @ p) / np.linalg.norm(np.abs(A) @ np.abs(p)) < 1e-5
    assert np.linalg.norm(cp.asnumpy(s) - A.T @ r) / np.linalg.norm(np.abs(A).T @ np.abs(r)) < 1e-5


@pytest.mark.parametrize("change, match", [
    (lambda a, cp: a.update(p=a["p"][:-1]), "p: length is 49, but A has columns 50"),
    (lambda a, cp: a.update(A=a["A"].astype(cp.float64)), "A: dtype is float64"),
    (lambda a, cp: a.update(A=a["A"].T.copy().T), "A: array is not C-contiguous"),
    (lambda a, cp: a.update(A=a["A"].ravel()), "A: expected a matrix"),
    (lambda a, cp: a.update(p=cp.asnumpy(a["p"])), "p: a NumPy array lives in host memory"),
    (lambda a, cp: a.pop("r"), "missing input"),
    (lambda a, cp: a.update(zz=1.0), "unknown input"),
])
def test_bad_arguments(bicgk, args, change, match):
    import cupy as cp
    change(args, cp)
    with pytest.raises(LaunchError, match=match):
        bicgk(**args)


def test_output_aliasing_refused(bicgk, args):
    with pytest.raises(LaunchError, match="share memory"):
        bicgk(**args, out={"q": args["r"]})   # q would overwrite the input r


def test_scalar_must_be_number():
    import cupy as cp
    prog = kfuse.compile(ROOT / "examples" / "sscal.kf")
    with pytest.raises(LaunchError, match="a: expected a real number"):
        prog(a="2", x=cp.ones(10, dtype=np.float32))


def test_a_declaration_never_used_is_no_size_to_give():
    """A script declaring a vector it never uses runs: nothing asks for that vector's size (before:
    "sizes must be positive integers: v.len" at the first call).  Output poisoned, fresh data,
    checked against float64 at a size that is not a multiple of 32."""
    import cupy as cp
    prog = kfuse.compile("matrix A; vector x, y, v; input A, x; y = gemv(A, x); return y;", dtype="float64")
    rng = np.random.default_rng(11)
    A, x = rng.standard_normal((45, 37)), rng.standard_normal(37)
    y = cp.full(45, np.nan)
    prog(A=cp.asarray(A), x=cp.asarray(x), out={"y": y}, sync=True)
    assert np.linalg.norm(cp.asnumpy(y) - A @ x) / np.linalg.norm(np.abs(A) @ np.abs(x)) < 1e-12
