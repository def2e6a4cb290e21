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
