"""Small sizes, where most kernels run one serial iteration: an unroll beyond the iterations is
priced at the iterations it runs and loses ties (CPU; the shipped H100 calibration ranks)."""
from pathlib import Path

import pytest

import kfuse

ROOT = Path(__file__).resolve().parents[1]
GEMV_CHAIN = """
matrix A, C, B;
vector x, y;
input A, C, x;
B = madd(A, C);
y = gemv(B, x);
return y;
"""


def _compile(tmp_path, n, dtype="float32"):
    path = tmp_path / "chain.kf"
    path.write_text(GEMV_CHAIN)
    return kfuse.compile(path, dtype=dtype, sizes={"A.rows": n, "A.cols": n}, tuned=False)


def _first_kernel(prog):
    s = prog.search
    plan = s.best()
    impl = plan.implementations[0]
    code = next(c for _, im, c in s.ranked[impl.calls] if im is impl)
    return s, impl, code


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_sizes_take_no_unroll_beyond_the_iterations(tmp_path, dtype):
    s, impl, code = _first_kernel(_compile(tmp_path, 1000, dtype))
    iters = s.ranker.iterations(code)
    assert iters == 1 and impl.unroll == 1, (iters, impl)
    # large sizes still unroll (many serial iterations per block)
    s, impl, code = _first_kernel(_compile(tmp_path, 8192, dtype))
    assert s.ranker.iterations(code) >= 4 and impl.unroll > 1


def test_an_unroll_beyond_the_iterations_is_priced_as_the_iterations(tmp_path):
    prog = _compile(tmp_path, 1000)
    s = prog.search
    assert hasattr(s.model, "cal"), "the shipped calibration ranks"
    codes = [c for ranked in s.ranked.values() for _, im, c in ranked if len(im.calls) == 2]
    by_unroll = {}
    for c in codes:
        if s.ranker.iterations(c) == 1:
            key = (tuple(kc.describe() for kc in c.spec.calls), c.spec.span, c.spec.ipb, c.spec.loop)
            by_unroll.setdefault(key, {})[c.spec.unroll] = s.model.kernel_time(c, s.dims, s.entries, s.itemsize)
    pairs = [t for t in by_unroll.values() if 1 in t and len(t) > 1]
    assert pairs, "implementations of one kernel that differ only in unroll"
    for t in pairs:
        assert all(v == pytest.approx(t[1], rel=1e-9) for v in t.values()), t
    # at n = 8192 the unroll changes the price (the calibration measured it)
    big = _compile(tmp_path, 8192).search
    prices = {}
    for ranked in big.ranked.values():
        for _, im, c in ranked:
            if len(im.calls) == 2:
                key = (tuple(kc.describe() for kc in c.spec.calls), c.spec.span, c.spec.ipb, c.spec.loop)
                prices.setdefault(key, set()).add(round(big.model.kernel_time(c, big.dims, big.entries, big.itemsize), 12))
    assert any(len(v) > 1 for v in prices.values())


def test_sizes_must_name_the_scripts_sizes(tmp_path):
    path = tmp_path / "chain.kf"
    path.write_text(GEMV_CHAIN)
    with pytest.raises(kfuse.KfuseError, match=r"'z.len', which is not a size of the script \(its sizes: A.rows, A.cols\)"):
        kfuse.compile(path, sizes={"z.len": 1000}, tuned=False)
    with pytest.raises(kfuse.KfuseError, match=r"sizes\['A.rows'\] must be a positive integer, got 0"):
        kfuse.compile(path, sizes={"A.rows": 0}, tuned=False)


def test_sizes_by_any_name_of_a_size(tmp_path):
    """x.len is the matrix's column count after unification: naming it sets that size."""
    path = tmp_path / "chain.kf"
    path.write_text(GEMV_CHAIN)
    prog = kfuse.compile(path, sizes={"x.len": 1000, "y.len": 3000}, tuned=False)
    assert sorted(prog.search.dims.values()) == [1000, 3000]
    assert prog.search.dims[prog.program.dims[1].id] == 1000            # A.cols
    with pytest.raises(kfuse.KfuseError, match=r"sizes\['x.len'\] = 1000 and sizes\['A.cols'\] = 999 name the same size"):
        kfuse.compile(path, sizes={"A.cols": 999, "x.len": 1000}, tuned=False)
