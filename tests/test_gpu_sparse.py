"""The sparse mat-vec on the GPU (run with -m gpu): spmv alone and fused into a CG step against a
float64 NumPy reference, on fresh random CSR matrices (empty rows, rows of one entry, one very long
row, m != n, sizes not multiples of 32), both dtypes, int32 and int64 indices, CuPy arrays, cupyx
and torch sparse CSR inputs; outputs poisoned with NaN first; the checks of malformed matrices;
``@kfuse.jit`` functions over CSR arguments and a ``kfuse.while_loop`` CG over a CSR matrix in its
state against SciPy."""
import zlib

import numpy as np
import pytest

import kfuse
from kfuse.errors import LaunchError
from kfuse.runtime import csr as csr_inputs

from test_sparse import _cg_body     # the CG iteration over a CSR state entry the CPU tests trace

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
    if kind == "ones_long":                            # rows of one entry (regular: lanes) and one of 100k
        n = np.ones(m, np.int64)
        n[m // 3] = 100_000
        return n
    if kind == "wide":
        return rng.integers(60, 300, m)
    if kind == "mixed":                                # streamed rows (some empty, some over a chunk) around
        n = rng.integers(8, 40, m)                     # long ones: the first, two adjacent, the last
        n[::7] = 0
        n[m // 2] = 200
        for r in (0, m // 3, m // 3 + 1, m - 1):
            n[r] = 5000 + r % 7
        return n
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
    (2053, 120_000, "long"), (4099, 3000, "wide"), (1000, 700, "ones"), (2053, 3000, "mixed"), (33, 50, "mixed"),
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
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_a_matrix_without_entries_gives_zeros(dtype, index):
    """A zero matrix in CSR (every row empty, empty index and value arrays): y = 0, over an output
    poisoned with NaN."""
    import cupy as cp
    m, n = 37, 20
    A = kfuse.CSR(cp.zeros(m + 1, index), cp.zeros(0, index), cp.zeros(0, dtype), (m, n))
    x = cp.asarray(np.random.default_rng(3).standard_normal(n).astype(dtype))
    y = prog(SPMV, dtype)(A=A, x=x, out={"y": cp.full(m, np.nan, dtype)})
    assert not np.any(cp.asnumpy(y))


@pytest.mark.parametrize("lanes", csr_inputs.LANE_CHOICES)
@pytest.mark.parametrize("dtype, index", [("float32", np.int64), ("float64", np.int32)])
@pytest.mark.parametrize("m, n, kind", [(33, 40, "short"), (2053, 120_000, "long"), (2053, 3000, "mixed"),
                                     (1000, 700, "ones"), (2053, 5000, "ones_long"), (1, 1, "ones")])
def test_every_row_mapping_forced_against_float64(monkeypatch, lanes, dtype, index, m, n, kind):
    """Every row mapping the kernel takes (``runtime.csr.LANES``: 0 streams, else lanes a row), on
    empty rows, rows of one entry, a long row among short ones and streamed-size rows around long
    ones, whichever ``mapping`` would choose."""
    import cupy as cp
    monkeypatch.setattr(csr_inputs, "LANES", lanes)
    seed = zlib.crc32(repr((lanes, dtype, m, n, kind)).encode())
    indptr, indices, data = make(m, n, kind, seed, index)
    data = data.astype(dtype).astype(np.float64)
    x = np.random.default_rng(seed + 1).standard_normal(n).astype(dtype).astype(np.float64)
    bound = prog(SPMV, dtype).bind(A=device_csr(indptr, indices, data, (m, n), dtype), x=cp.asarray(x.astype(dtype)),
                                   out={"y": cp.full(m, np.nan, dtype)})
    assert bound.binding.csr_mapping["A"][0] == lanes
    y = bound()
    ref, mag = reference(indptr, indices, data, x, m)
    assert rel(cp.asnumpy(y).astype(np.float64), ref, mag) < TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, n, kind", [(2053, 2053, "short"), (2053, 120_000, "long"), (1000, 1000, "mid"),
                                     (2053, 2053, "mixed")])
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
    lanes, long_row = bound.binding.csr_mapping["A"][:2]
    assert long_row > 0 and 1 <= lanes <= 4                  # short rows of 0-5: groups of lanes
    assert [launch.name for launch in bound.launches] == ["kf_spmv_long_rows", P.kernels[0].spec.name]
    assert bound.launches[0].grid == -(-100_000 // 4096)     # the long row in pieces of 4096 entries
    indptr, indices, data = make(2053, 120_000, "ones_long", 3)
    bound = P.bind(A=device_csr(indptr, indices, data, (2053, 120_000), "float64"), x=cp.ones(120_000))
    assert bound.binding.csr_mapping["A"][:2] == [1, 256]    # regular short rows: a lane each
    assert [launch.name for launch in bound.launches] == ["kf_spmv_long_rows", P.kernels[0].spec.name]
    indptr, indices, data = make(1000, 1000, "wide", 4)
    bound = P.bind(A=device_csr(indptr, indices, data, (1000, 1000), "float64"), x=cp.ones(1000))
    assert bound.binding.csr_mapping["A"][:2] == [0, 0]      # streamed, no long rows: no pre-pass
    assert [launch.name for launch in bound.launches] == [P.kernels[0].spec.name]
    indptr, indices, data = make(2053, 3000, "mixed", 5)
    bound = P.bind(A=device_csr(indptr, indices, data, (2053, 3000), "float64"), x=cp.ones(3000))
    lanes, long_row = bound.binding.csr_mapping["A"][:2]
    assert lanes == 0 and 200 < long_row < 5000              # streamed around the long rows
    assert bound.launches[0].grid == 4 * 2                   # four rows of 5000-5006 entries, two pieces each


def test_one_binding_switches_its_pre_pass_with_the_matrix():
    """A binding called with a matrix with long rows, then one without, then the first again: the
    pre-pass comes and goes with the matrix (graphs included: the third call replays), and every
    result is right."""
    import cupy as cp
    P = prog(SPMV, "float64")
    mats = [make(2053, 2053, kind, 40 + k) for k, kind in enumerate(("mixed", "mid"))]
    x = np.random.default_rng(9).standard_normal(2053)
    outs = []
    for indptr, indices, data in mats + mats[:1] + mats[1:] + mats[:1]:
        y = P(A=device_csr(indptr, indices, data, (2053, 2053), "float64"), x=cp.asarray(x),
              out={"y": cp.full(2053, np.nan)})
        ref, mag = reference(indptr, indices, data, x, 2053)
        outs.append(rel(cp.asnumpy(y), ref, mag))
    assert max(outs) < 1e-12, outs


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


def test_a_warp_streams_a_row_past_2_to_the_31_entries_of_int64_indices():
    """Issue 60, finding 3, on the GPU: a warp whose 8th row starts past 2^31 entries after its
    first (7 long rows of about 3.07e8 entries before it, summed by the pre-pass; the other rows of
    16 entries: streamed) sums that row.  With int offsets the warp's offsets wrapped negative and
    its rows came out 0.  int64 indices and float64 values of 1: every row's sum is its length.
    About 34 GB of GPU memory."""
    import cupy as cp
    m, cols = 1024, 1024
    long = (1 << 31) // 7 + 1
    lengths = np.array([long] * 7 + [16] * (m - 7), np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    nnz = int(indptr[-1])
    assert indptr[7] > 2 ** 31
    try:
        indices = cp.arange(nnz, dtype=cp.int64)
        cp.remainder(indices, cols, out=indices)
        data = cp.ones(nnz)
        A = kfuse.CSR(cp.asarray(indptr), indices, data, (m, cols))
        y = prog(SPMV, "float64")(A=A, x=cp.ones(cols))
        assert cp.asnumpy(y).tolist() == lengths.astype(np.float64).tolist()
    finally:
        A = indices = data = None
        cp.get_default_memory_pool().free_all_blocks()


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


# -- @kfuse.jit and device loops over CSR matrices -----------------------------------------------------
@kfuse.jit
def jit_step(A, p, r):
    q = A @ p
    return q, p @ q, kfuse.lib.spmv(A, r) + 2.0 * r


@kfuse.jit
def jit_spmv(A, x):
    return kfuse.lib.spmv(A, x)


def _poison(framework: str, dtype: str, n: int) -> None:
    """Fill memory the allocator hands out next with NaN (blocks of the results' size and a large
    one to split): a result an unwritten entry of which stays NaN fails its check."""
    if framework == "torch":
        import torch
        blocks = [torch.full((k,), float("nan"), dtype=getattr(torch, dtype), device="cuda")
                  for k in (n, n, n, 1, 1, 1 << 20)]
    else:
        import cupy as cp
        blocks = [cp.full(k, np.nan, dtype) for k in (n, n, n, 1, 1, 1 << 20)]
    del blocks


def _operands(framework: str, indptr, indices, data, shape, dtype, *vectors):
    """The matrix and vectors as ``framework`` gives them: kfuse.CSR of CuPy arrays, a cupyx
    csr_matrix, or a torch sparse CSR CUDA tensor (and torch vectors)."""
    import cupy as cp
    if framework == "torch":
        torch = pytest.importorskip("torch")
        A = torch.sparse_csr_tensor(torch.as_tensor(indptr), torch.as_tensor(indices),
                                    torch.as_tensor(data.astype(dtype)), size=shape).cuda()
        return A, *(torch.as_tensor(v.astype(dtype)).cuda() for v in vectors)
    if framework == "cupyx":
        import cupyx.scipy.sparse as cps
        A = cps.csr_matrix((cp.asarray(data.astype(dtype)), cp.asarray(indices), cp.asarray(indptr)), shape=shape)
    else:
        A = device_csr(indptr, indices, data, shape, dtype)
    return A, *(cp.asarray(v.astype(dtype)) for v in vectors)


def _host(x) -> np.ndarray:
    if hasattr(x, "cpu"):
        return x.cpu().numpy().astype(np.float64)
    import cupy as cp
    return cp.asnumpy(x).astype(np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m", [33, 2053])
@pytest.mark.parametrize("framework, index", [("kfuse", np.int32), ("kfuse", np.int64), ("cupyx", np.int32),
                                              ("torch", np.int32), ("torch", np.int64)])   # cupyx: int32 only
def test_jit_spmv_and_dot_against_float64(dtype, index, m, framework):
    seed = zlib.crc32(repr(("jit", dtype, index.__name__, m, framework)).encode())
    indptr, indices, data = make(m, m, "short", seed, index)
    data = data.astype(dtype).astype(np.float64)
    rng = np.random.default_rng(seed + 1)
    p, r = (rng.standard_normal(m).astype(dtype).astype(np.float64) for _ in range(2))
    A, pd, rd = _operands(framework, indptr, indices, data, (m, m), dtype, p, r)
    _poison(framework, dtype, m)
    q, pq, w = jit_step(A, pd, rd)
    assert type(q) is type(pd) and str(q.dtype).removeprefix("torch.") == dtype
    qr, qm = reference(indptr, indices, data, p, m)
    assert rel(_host(q), qr, qm) < TOL[dtype]
    assert abs(float(pq) - p @ qr) / max(np.abs(p) @ qm, 1e-300) < 10 * TOL[dtype]
    wr, wm = reference(indptr, indices, data, r, m)
    assert rel(_host(w), wr + 2.0 * r, wm + 2.0 * np.abs(r)) < TOL[dtype]
    q2, _, _ = jit_step(A, pd, rd)            # the cached entry, the same binding
    assert rel(_host(q2), qr, qm) < TOL[dtype]
    # a rectangular matrix, the other index type under the same entry
    n = m + 17
    indptr, indices, data = make(m, n, "mid", seed + 2, np.int64 if index is np.int32 else np.int32)
    if framework == "cupyx":
        indptr, indices = indptr.astype(np.int32), indices.astype(np.int32)
    data = data.astype(dtype).astype(np.float64)
    x = rng.standard_normal(n).astype(dtype).astype(np.float64)
    A, xd = _operands(framework, indptr, indices, data, (m, n), dtype, x)
    _poison(framework, dtype, m)
    y = jit_spmv(A, xd)
    ref, mag = reference(indptr, indices, data, x, m)
    assert rel(_host(y), ref, mag) < TOL[dtype]


def test_jit_refuses_a_scipy_matrix_and_checks_the_structure():
    import cupy as cp
    from kfuse.errors import TraceError
    sp = pytest.importorskip("scipy.sparse")
    indptr, indices, data = make(100, 50, "short", 5)
    with pytest.raises(TraceError, match="host memory"):
        jit_spmv(sp.csr_matrix((data, indices, indptr), shape=(100, 50)), cp.ones(50))
    bad = indices.copy()
    bad[3] = 50
    with pytest.raises(LaunchError, match="column index 50 out of range"):
        jit_spmv(device_csr(indptr, bad, data, (100, 50), "float64"), cp.ones(50))


def _laplacian(n: int):
    """The 7-point Laplacian of an n x n x n grid (SciPy CSR, float64): SPD."""
    sp = pytest.importorskip("scipy.sparse")
    d = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    eye = sp.identity(n)
    return (sp.kron(sp.kron(d, eye), eye) + sp.kron(sp.kron(eye, d), eye) + sp.kron(sp.kron(eye, eye), d)).tocsr()


@pytest.mark.parametrize("framework, index", [("cupyx", np.int32), ("torch", np.int64), ("kfuse", np.int64)])
def test_while_loop_cg_over_a_csr_matrix_against_spsolve(framework, index):
    spla = pytest.importorskip("scipy.sparse.linalg")
    A = _laplacian(12)                       # 1728 rows, condition number about 68
    m = A.shape[0]
    Ad, = _operands(framework, A.indptr.astype(index), A.indices.astype(index), A.data, A.shape, "float64")
    for seed in (1, 2):                       # a second solve: the same instance, a new right-hand side
        b = np.random.default_rng(seed).standard_normal(m)
        bd = _operands(framework, A.indptr, A.indices, A.data, A.shape, "float64", b)[1]
        bb = bd @ bd
        s = kfuse.while_loop(lambda s: s[5] > 1e-24 * s[1], _cg_body, (Ad, bb, bd * 0, bd, bd, bb),
                             max_iterations=2000)
        assert s.converged and 10 < s.iterations < 2000
        assert s[0] is Ad                     # read in place, returned as given
        ref = spla.spsolve(A.tocsc(), b)
        assert np.linalg.norm(_host(s[2]) - ref) / np.linalg.norm(ref) < 1e-9
        assert float(s[5]) <= 1e-24 * float(bb) * (1 + 1e-6)


def test_the_sparse_cg_example_matches_scipy():
    import cupy as cp
    import cupyx.scipy.sparse as cps
    spla = pytest.importorskip("scipy.sparse.linalg")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "solvers"))
    import sparse_cg
    for A in (sparse_cg.mesh_matrix(10), sparse_cg.skewed_matrix(3000)):
        b = np.random.default_rng(3).standard_normal(A.shape[0])
        x, rr, steps = sparse_cg.sparse_cg(cps.csr_matrix(A), cp.asarray(b), tol=1e-10, max_iterations=5000)
        ref = spla.spsolve(A.tocsc(), b)
        assert 0 < steps < 5000
        assert np.linalg.norm(cp.asnumpy(x) - ref) / np.linalg.norm(ref) < 1e-7
    # rows of ~1200 entries (long: summed before each step's mat-vec); a direct solve of this size
    # fills in, so the residual is checked instead
    A = sparse_cg.skewed_matrix(20_000)
    assert np.diff(A.indptr).max() > 256
    b = np.random.default_rng(4).standard_normal(A.shape[0])
    x, rr, steps = sparse_cg.sparse_cg(cps.csr_matrix(A), cp.asarray(b), tol=1e-10, max_iterations=5000)
    assert 0 < steps < 5000
    assert np.linalg.norm(b - A @ cp.asnumpy(x)) / np.linalg.norm(b) < 1e-9


def test_the_sparse_cg_example_demo_runs_in_seconds(capsys):
    """Issue 60, finding 20: the example as shipped (two matrices, two dtypes, each solution's
    float64 residual checked with SciPy's sparse mat-vec, ``sparse_cg.check``) ends in seconds;
    its reference was a direct solve that filled in (minutes)."""
    import sys
    import time
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "solvers"))
    import sparse_cg
    start = time.perf_counter()
    sparse_cg.demo()
    took = time.perf_counter() - start
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all("||b - A x|| / ||b|| = " in line for line in lines), lines
    assert took < 120, f"the demo took {took:.0f} s"


def test_a_loop_over_a_matrix_with_long_rows_sums_them_every_step():
    """A fori loop of mat-vecs over a matrix with long rows (their pre-pass is a node of every
    step's graph, reading that step's vector): the same as the steps made one by one."""
    import cupy as cp
    m = 2053
    indptr, indices, data = make(m, m, "mixed", 12)
    data = data / 60.0
    A = device_csr(indptr, indices, data, (m, m), "float64")
    x = np.random.default_rng(13).standard_normal(m)
    s = kfuse.fori_loop(0, 6, lambda i, s: (s[0], s[0] @ s[1]), (A, cp.asarray(x)))
    ref = x
    for _ in range(6):
        ref = reference(indptr, indices, data, ref, m)[0]
    assert np.linalg.norm(cp.asnumpy(s[1]) - ref) / np.linalg.norm(ref) < 1e-12


def test_a_malformed_csr_matrix_in_a_loop_is_refused_at_bind():
    import cupy as cp
    indptr, indices, data = make(100, 100, "short", 6)
    indices = indices.copy()
    indices[0] = 100
    A = device_csr(indptr, indices, data, (100, 100), "float64")
    v = cp.ones(100)
    with pytest.raises(LaunchError, match="column index 100 out of range"):
        kfuse.fori_loop(0, 3, lambda i, s: (s[0], s[0] @ s[1]), (A, v))
