"""One-pass ATAX (a reduction's result used in the kernel that computes it, issue 18) on the GPU
(-m gpu): the planned program against the float64 reference, outputs poisoned with NaN, fresh
random inputs, at odd sizes; a size whose rows do not fit a block takes the two-kernel plan."""
import pytest

import kfuse

from conftest import EXAMPLES
from fusion_util import renamed
from test_gpu_examples import TOL, run_checked
from kfuse.compiler.pipeline import uncovered_at

pytestmark = pytest.mark.gpu
ATAX = next(p for p in EXAMPLES if p.stem == "atax")


def _one_pass(prog) -> bool:
    return len(prog.kernels) == 1 and all(kc.variant.whole for kc in prog.plan.kernels[0].calls)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 31, 33, 1000, 4097, 8192])
def test_atax_one_pass_matches_reference(n, dtype):
    prog = kfuse.compile(ATAX, dtype=dtype, tuned=False, sizes={"n": n})
    assert _one_pass(prog), prog.describe()
    errors = run_checked(prog, n)
    assert all(e < TOL[dtype] for e in errors.values()), errors


# ATAX of an m x n matrix: rows of n entries (short columns keep the odd long rows small)
ATAX_MN = "matrix A[m, n]; vector x[n], t[m], y[n]; input A, x; t = gemv(A, x); y = gemtv(A, t); return y;"


@pytest.mark.parametrize("dtype, m, n", [
    ("float32", 20000, 20000), ("float64", 16384, 16384),        # square
    ("float32", 777, 16385), ("float32", 31, 40000), ("float32", 1000, 60001),
    ("float64", 777, 8193), ("float64", 1000, 20001), ("float64", 33, 65536)])
def test_atax_rows_longer_than_a_block_in_one_pass_over_a_cluster(dtype, m, n):
    """Rows too long for one block's registers: one pass, the strip split over a thread-block
    cluster of 2, 4 or 8 blocks (the row sums through distributed shared memory), its grid within
    the clusters the GPU holds at once; blocks past the row's end (float64 20001: 3 tiles of 8192
    in a cluster of 4) add nothing."""
    prog = kfuse.compile(ATAX_MN, dtype=dtype, tuned=False, sizes={"m": m, "n": n})
    assert _one_pass(prog), prog.describe()
    assert prog.kernels[0].launch.cluster > 1, prog.describe()
    errors = run_checked(prog, {"m": m, "n": n})
    assert all(e < TOL[dtype] for e in errors.values()), errors


@pytest.mark.parametrize("dtype, n", [("float32", 131073), ("float64", 65537)])
def test_atax_rows_too_long_for_a_cluster_take_two_kernels(n, dtype):
    prog = kfuse.compile(ATAX_MN, dtype=dtype, tuned=False, sizes={"m": 33, "n": n})
    assert len(prog.kernels) == 2, prog.describe()
    errors = run_checked(prog, {"m": 33, "n": n})
    assert all(e < TOL[dtype] for e in errors.values()), errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_atax_class_plan_replanned_for_longer_rows(dtype):
    """Planned at n = 4096 (strips of 4096 columns); called at 4097, of the same size class: the
    call path plans again for rows that fit no such strip, and the result is right."""
    prog = kfuse.compile(ATAX, dtype=dtype, tuned=False, sizes={"n": 4096})
    assert _one_pass(prog)
    errors = run_checked(prog, 4097)
    assert all(e < TOL[dtype] for e in errors.values()), errors
    assert uncovered_at(prog.for_sizes({0: 4097}).kernels, {0: 4097}) is None


# ---- vector calls on the rows of strips: a gemv's result used by a dot or an axpy in its kernel
from test_onepass_rows import ROWS, fused  # noqa: E402


def _sizes(name, n):
    return {"m": 33 if n > 1 else 1, "n": n} if name == "rect" else {"n": n}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 33, 1000, 4097, 8192])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_vector_calls_on_strip_rows_match_reference(name, n, dtype):
    """The fused kernel (every call in one, the vector calls on the strips' rows), its first
    implementation: whether the model puts it first depends on the GPU's calibration (the H100's
    does at these sizes, the H200's not at 8192; tests/test_onepass_rows.py checks the H100's)."""
    prog = kfuse.compile(ROWS[name], dtype=dtype, tuned=False, sizes=_sizes(name, n), vector_on_strips=True)
    if n >= 33:
        full = frozenset(range(len(prog.program.calls)))
        prog = prog.with_plan(prog.search.plan((full,), (0,)))
        assert fused(prog), prog.describe()
    errors = run_checked(prog, _sizes(name, n))
    assert all(e < TOL[dtype] for e in errors.values()), errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_fused_implementation_on_strip_rows_matches_reference(name, dtype):
    """Every implementation the search keeps for the fused kernel at n = 1000 (both loop axes,
    strips of 1 or 2 rows, 256 or 512 threads), one module for all, each against the reference."""
    from kfuse.tuning.measure import share_module
    sizes = _sizes(name, 1000)
    base = kfuse.compile(ROWS[name], dtype=dtype, tuned=False, sizes=sizes, vector_on_strips=True)
    full = frozenset(range(len(base.program.calls)))
    progs = [base.with_plan(renamed(base.search.plan((full,), (m,)), f"v{m}"))
             for m in range(len(base.search.ranked[full]))]
    dims = {d.id: sizes[d.name] for d in base.program.dims}
    _, progs = share_module(progs, f"{name} on strips", dims)
    for prog in progs:
        errors = run_checked(prog, sizes)
        assert all(e < TOL[dtype] for e in errors.values()), (prog.describe(), errors)
