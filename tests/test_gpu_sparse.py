"""The sparse mat-vec on the GPU (run with -m gpu): spmv alone and fused into a CG step against a
float64 NumPy reference, on fresh random CSR matrices (empty rows, rows of one entry, one very long
row, m != n, sizes not multiples of 32), both dtypes, int32 and int64 indices, CuPy arrays, cupyx
and torch sparse CSR inputs; outputs poisoned with NaN first; the checks of malformed matrices."""
import zlib

import numpy as np
import pytest

import kfuse
from kfuse.errors import LaunchError

pytestmark = pytest.mark.gpu
TOL = {"float32": 1e-5, "float64": 1e-12}

SPMV = "csr A;\nvector x, y;\ninput A, x;\ny = spmv(A, x);\nreturn y;\n"
STEP = """csr A;
vector p, q, r, w;
scalar pq, a, s;
input A, p, r, a;
q = spmv(A, p);
pq = dot(p, q);
w = axpy(a, q, r);
s = dot(w, w);
return q, pq, w, s;
"""
_progs: dict = {}


def prog(src, dtype):
    if (src, dtype) not in _progs:
        _progs[src, dtype] = kfuse.compile(src, dtype=dtype)
    return _progs[src, dtype]


def lengths(kind: str, m: int, rng) -> np.ndarray:
    if kind == "short":
        return rng.integers(0, 8, m)                   # empty rows among them
    if kind == "ones":
        return np.ones(m, np.int64)
    if kind == "mid":
        return rng.integers(8, 40, m)
    if kind == "long":                                 # one row of 100k entries, the rest short
        n = rng.integers(0, 6, m)
        n[m // 2] = 100_000
        return n
    if kind == "wide":
        return rng.integers(60, 300, m)
    raise KeyError(kind)


def make(m, n, kind, seed, index=np.int32):
    """(indptr, indices, data as float64) of a random m x n CSR matrix (unsorted columns; a row
    may repeat a column)."""
    rng = np.random.default_rng(seed)
    counts = lengths(kind, m, rng)
    indptr = np.zeros(m + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    if nnz == 0:
        counts[0], nnz = 1, 1
        indptr[1:] = np.cumsum(counts)
    indices = rng.integers(0, n, nnz)
    data = rng.standard_normal(nnz)
    return indptr.astype(index), indices.astype(index), data


def reference(indptr, indices, data, x, m):
    """(A x, |A| |x|) in float64."""
    rows = np.repeat(np.arange(m), np.diff(indptr.astype(np.int64)))
    t = data * x[indices.astype(np.int64)]
    return np.bincount(rows, t, minlength=m), np.bincount(rows, np.abs(t), minlength=m)


def rel(got, ref, mag):
    return float(np.max(np.abs(got - ref) / np.maximum(mag, np.finfo(np.float64).tiny)))


def device_csr(indptr, indices, data, shape, dtype):
    import cupy as cp
    return kfuse.CSR(cp.asarray(indptr), cp.asarray(indices), cp.asarray(data.astype(dtype)), shape)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("m, n, kind", [
    (1, 1, "ones"), (33, 40, "short"), (1000, 1000, "mid"), (2053, 1500, "short"),
    (2053, 120_000, "long"), (4099, 3000, "wide"), (1000, 700, "ones"),
])
def test_spmv_against_float64(dtype, index, m, n, kind):
    import cupy as cp
    seed = zlib.crc32(repr((dtype, index.__name__, m, n, kind)).encode())
    indptr, indices, data = make(m, n, kind, seed, index)
    data = data.astype(dtype).astype(np.float64)
    x = np.random.default_rng(seed + 1).standard_normal(n).astype(dtype).astype(np.float64)
    A = device_csr(indptr, indices, data, (m, n), dtype)
    out = cp.full(m, np.nan, dtype)
    y = prog(SPMV, dtype)(A=A, x=cp.asarray(x.astype(dtype)), out={"y": out})
    ref, mag = reference(indptr, indices, data, x, m)
    assert rel(cp.asnumpy(y).astype(np.float64), ref, mag) < TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, n, kind", [(2053, 2053, "short"), (2053, 120_000, "long"), (1000, 1000, "mid")])
def test_fused_cg_step_against_float64(dtype, m, n, kind):
    import cupy as cp
    if kind == "long":
        m, n = 2053, 2053          # a square matrix: p and q are one length
    indptr, indices, data = make(m, n, kind, 7 + m, np.int32)
    indices = indices % n
    data = data.astype(dtype).astype(np.float64)
    rng = np.random.default_rng(m)
    p, r = (rng.standard_normal(n).astype(dtype).astype(np.float64) for _ in range(2))
    a = 0.375
    A = device_csr(indptr, indices, data, (m, n), dtype)
    P = prog(STEP, dtype)
    first = {kc.call.function.name for kc in P.kernels[0].spec.calls}
    assert {"spmv", "dot"} <= first, first
    outs = {"q": cp.full(m, np.nan, dtype), "w": cp.full(m, np.nan, dtype)}
    q, pq, w, s = P(A=A, p=cp.asarray(p.astype(dtype)), r=cp.asarray(r.astype(dtype)), a=a, out=outs)
    qr, qm = reference(indptr, indices, data, p, m)
    assert rel(cp.asnumpy(q).astype(np.float64), qr, qm) < TOL[dtype]
    pq_ref, pq_mag = p @ qr, np.abs(p) @ qm
    assert abs(float(pq) - pq_ref) / pq_mag < 10 * TOL[dtype]
    wr, wm = a * qr + r, abs(a) * qm + np.abs(r)
    assert rel(cp.asnumpy(w).astype(np.float64), wr, wm) < TOL[dtype]
    assert abs(float(s) - wr @ wr) / (wm @ wm) < 10 * TOL[dtype]


def test_long_rows_take_the_instance_path_and_short_rows_their_lanes():
    import cupy as cp
    indptr, indices, data = make(2053, 120_000, "long", 3)
    P = prog(SPMV, "float64")
    A = device_csr(indptr, indices, data, (2053, 120_000), "float64")
    bound = P.bind(A=A, x=cp.ones(120_000))
    lanes, long_row = bound.binding.csr_mapping["A"]
    assert long_row > 0 and lanes <= 4
    indptr, indices, data = make(1000, 1000, "wide", 4)
    bound = P.bind(A=device_csr(indptr, indices, data, (1000, 1000), "float64"), x=cp.ones(1000))
    assert bound.binding.csr_mapping["A"] == [32, 0]


def test_cupyx_and_torch_sparse_inputs():
    import cupy as cp
    import cupyx.scipy.sparse as cps
    m, n = 2053, 1500
    indptr, indices, data = make(m, n, "mid", 11)
    x = np.random.default_rng(5).standard_normal(n)
    ref, mag = reference(indptr, indices, data, x, m)
    P = prog(SPMV, "float64")
    A = cps.csr_matrix((cp.asarray(data), cp.asarray(indices), cp.asarray(indptr)), shape=(m, n))
    assert rel(cp.asnumpy(P(A=A, x=cp.asarray(x))), ref, mag) < 1e-12
    torch = pytest.importorskip("torch")
    T = torch.sparse_csr_tensor(torch.as_tensor(indptr.astype(np.int64)), torch.as_tensor(indices.astype(np.int64)),
                                torch.as_tensor(data), size=(m, n)).cuda()
    y = P(A=T, x=torch.as_tensor(x).cuda())
    assert isinstance(y, torch.Tensor) and rel(y.cpu().numpy(), ref, mag) < 1e-12


def _bad(change):
    indptr, indices, data = make(100, 50, "short", 2)
    indptr, indices = indptr.copy(), indices.copy()
    change(indptr, indices)
    return indptr, indices, data


@pytest.mark.parametrize("change, words", [
    (lambda p, i: p.__setitem__(0, 1), "indptr[0] is 1"),
    (lambda p, i: p.__setitem__(-1, p[-1] - 1), "indptr[100]"),
    (lambda p, i: p.__setitem__(50, p[49] - 1), "row pointers decrease"),
    (lambda p, i: i.__setitem__(3, 50), "column index 50 out of range"),
    (lambda p, i: i.__setitem__(0, -2), "column index -2 out of range"),
])
def test_malformed_csr_is_a_clean_error(change, words):
    import cupy as cp
    indptr, indices, data = _bad(change)
    with pytest.raises(LaunchError) as e:
        prog(SPMV, "float64")(A=device_csr(indptr, indices, data, (100, 50), "float64"), x=cp.ones(50))
    assert words in str(e.value)


def test_new_index_arrays_under_a_known_signature_are_checked_again():
    import cupy as cp
    P = prog(SPMV, "float64")
    indptr, indices, data = make(100, 50, "short", 9)
    good = device_csr(indptr, indices, data, (100, 50), "float64")
    P(A=good, x=cp.ones(50))
    bad_indices = cp.asarray(indices)
    bad_indices[0] = 77
    with pytest.raises(LaunchError, match="column index 77"):
        P(A=kfuse.CSR(good.indptr, bad_indices, good.data, (100, 50)), x=cp.ones(50))


def test_wrong_dtypes_and_shapes_are_clean_errors():
    import cupy as cp
    P = prog(SPMV, "float64")
    indptr, indices, data = make(100, 50, "short", 1)
    with pytest.raises(LaunchError, match="compiled for float64"):
        P(A=device_csr(indptr, indices, data, (100, 50), "float32"), x=cp.ones(50))
    with pytest.raises(LaunchError, match="int32 or int64"):
        P(A=kfuse.CSR(cp.asarray(indptr.astype(np.int16)), cp.asarray(indices.astype(np.int16)),
                      cp.asarray(data), (100, 50)), x=cp.ones(50))
    with pytest.raises(LaunchError, match="101 entries"):
        P(A=device_csr(indptr, indices, data, (99, 50), "float64"), x=cp.ones(50))
    with pytest.raises(LaunchError, match="x"):
        P(A=device_csr(indptr, indices, data, (100, 50), "float64"), x=cp.ones(49))
    scipy_sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(LaunchError, match="host memory"):
        P(A=scipy_sparse.csr_matrix((data, indices, indptr), shape=(100, 50)), x=cp.ones(50))
