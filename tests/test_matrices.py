"""benchmarks/matrices.py on the CPU (issue 58, item 3): every generator gives a valid CSR matrix
(sorted, unique columns, row pointers from 0 to nnz) at small sizes, sizes that are not multiples
of 32 among them; the symmetric positive definite ones are symmetric, strictly diagonally
dominant and have a positive smallest eigenvalue; each kind has the row-length profile it stands
for; a seed gives the same matrix; int32/int64 indices; the CSR product equals the dense one."""
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import matrices  # noqa: E402

NAMES = list(matrices.MATRICES)
SPD = [n for n in NAMES if n != "random_uniform"]


def _rows_of_entries(m) -> np.ndarray:
    return np.repeat(np.arange(m.rows), m.row_lengths())


def _dense(m) -> np.ndarray:
    a = np.zeros(m.shape)
    np.add.at(a, (_rows_of_entries(m), m.indices), m.data)      # add.at: a repeated entry would add up
    return a


def _transpose(m):
    """(indptr, indices, data) of the transpose, built from the entries sorted by (column, row)."""
    rows = _rows_of_entries(m)
    order = np.lexsort((rows, m.indices))
    indptr = np.zeros(m.cols + 1, np.int64)
    np.cumsum(np.bincount(m.indices, minlength=m.cols), out=indptr[1:])
    return indptr, rows[order], m.data[order]


def test_the_set_and_its_order():
    assert NAMES == ["fe3d_27", "fe2d_q2", "powerlaw_laplacian", "circuit", "block_diagonal", "banded",
                     "diagonal", "random_uniform"]
    got = list(matrices.matrix_set(100, names=["diagonal", "fe3d_27"]))
    assert [m.name for m in got] == ["fe3d_27", "diagonal"]          # the set's order, not the caller's
    with pytest.raises(ValueError, match="unknown matrices"):
        list(matrices.matrix_set(100, names=["nope"]))
    with pytest.raises(ValueError, match="at least 1"):
        matrices.banded(0)


@pytest.mark.parametrize("rows", [1, 7, 33, 100, 333, 1000])
@pytest.mark.parametrize("name", NAMES)
def test_valid_csr(name, rows):
    m = matrices.MATRICES[name](rows, seed=5)
    assert m.name == name
    assert m.indptr.dtype == m.indices.dtype == np.int64 and m.data.dtype == np.float64
    assert m.indptr.shape == (m.rows + 1,) and m.data.shape == m.indices.shape == (m.nnz,)
    assert m.indptr[0] == 0 and m.indptr[-1] == m.nnz
    assert np.all(np.diff(m.indptr) >= 0)
    assert m.nnz == 0 or (m.indices.min() >= 0 and m.indices.max() < m.cols)
    # sorted and unique within each row: increasing except where a new row starts
    step = np.diff(m.indices)
    starts = np.zeros(max(m.nnz - 1, 0), bool)
    inner = m.indptr[1:-1]
    starts[inner[(inner > 0) & (inner < m.nnz)] - 1] = True
    assert np.all((step > 0) | starts)
    assert np.all(np.isfinite(m.data))
    if name in ("fe3d_27", "fe2d_q2"):
        assert rows / 8 <= m.rows <= 8 * max(rows, 8)                # a grid about the size asked for
    else:
        assert m.rows == m.cols == rows


@pytest.mark.parametrize("name", SPD)
def test_spd_matrices_are_symmetric_dominant_and_positive_definite(name):
    m = matrices.MATRICES[name](300, seed=2)
    assert m.spd
    indptr, indices, data = _transpose(m)
    assert np.array_equal(indptr, m.indptr) and np.array_equal(indices, m.indices)
    assert np.array_equal(data, m.data)                              # bitwise: w(i, j) == w(j, i)
    rows = _rows_of_entries(m)
    on = rows == m.indices
    diag = np.zeros(m.rows)
    diag[rows[on]] = m.data[on]
    assert np.count_nonzero(on) == m.rows and np.all(diag > 0)
    off = np.bincount(rows[~on], weights=np.abs(m.data[~on]), minlength=m.rows)
    assert np.all(diag - off > 0.5 * matrices.SHIFT)                 # strictly diagonally dominant
    low = np.linalg.eigvalsh(_dense(m))[0]
    assert low > 0.5 * matrices.SHIFT, low


def test_random_uniform_is_not_symmetric_and_spread():
    m = matrices.random_uniform(500, seed=1)
    assert not m.spd
    a = _dense(m)
    assert not np.array_equal(a, a.T)
    d = m.row_lengths()
    assert d.max() <= 16 and d.min() >= 1 and 8 <= d.mean() <= 16
    span = np.diff(m.indices)[np.diff(_rows_of_entries(m)) == 0]
    assert span.max() > 100                                          # columns anywhere, not a band
    big = matrices.random_uniform(20_000, seed=1).row_lengths()
    assert set(np.unique(big)) >= set(range(9, 16)) and 11 <= big.mean() <= 13


@pytest.mark.parametrize("rows", [500, 3000, 20_000])
def test_powerlaw_rows_are_skewed(rows):
    s = matrices.powerlaw_laplacian(rows, seed=rows).stats()
    assert s["max"] >= 8 * s["mean"], s
    assert s["median"] <= s["mean"] and s["empty"] == 0


@pytest.mark.parametrize("rows", [300, 5000])
def test_circuit_has_dense_rows_and_columns(rows):
    m = matrices.circuit(rows, seed=3)
    d = m.row_lengths()
    dense_rows = np.flatnonzero(d > 0.05 * rows)
    dense_cols = np.flatnonzero(np.bincount(m.indices, minlength=m.cols) > 0.05 * rows)
    assert 4 <= len(dense_rows) <= 8 and np.array_equal(dense_rows, dense_cols)
    assert np.mean((d >= 2) & (d <= 6)) > 0.75                      # mostly 2-6 entries a row
    assert 2 <= np.median(d) <= 6


def test_fe2d_q2_row_lengths():
    m = matrices.fe2d_q2(441)                                        # k = 10: a 21 x 21 grid of nodes
    assert m.rows == 21 * 21
    d = m.row_lengths().reshape(21, 21)
    assert sorted(np.unique(d)) == [9, 15, 25] and d.max() == 25
    assert d[2, 2] == 25 and d[2, 3] == 15 and d[3, 3] == 9          # vertex, edge midpoint, centre
    assert np.all(d[2:-2:2, 2:-2:2] == 25)                           # interior vertices: 5 x 5 nodes
    assert d[0, 0] == 9 and d[0, 2] == 15 and d[0, 1] == 9           # the boundary's
    # node (2, 2)'s columns: rows 0-4 by columns 0-4 of the grid
    cols = m.indices[m.indptr[2 * 21 + 2]:m.indptr[2 * 21 + 3]]
    assert np.array_equal(cols, (np.arange(5)[:, None] * 21 + np.arange(5)).ravel())


def test_fe3d_27_row_lengths():
    m = matrices.fe3d_27(1000)
    k = 10
    assert m.rows == k**3
    d = m.row_lengths().reshape(k, k, k)
    assert np.all(d[1:-1, 1:-1, 1:-1] == 27) and d.max() == 27
    assert d[0, 0, 0] == 8 and d[0, 0, 5] == 12 and d[0, 5, 5] == 18
    assert np.count_nonzero(d == 27) == (k - 2) ** 3


def test_block_banded_and_diagonal_shapes():
    b = matrices.block_diagonal(1000, seed=4)
    rows = _rows_of_entries(b)
    d = b.row_lengths()
    assert np.all(d[:-64] >= 16) and d.max() <= 64
    # each row: a contiguous run of columns holding the diagonal, its length the run's (block's) size
    first, last = b.indices[b.indptr[:-1]], b.indices[b.indptr[1:] - 1]
    assert np.all(last - first + 1 == d) and np.all((first <= np.arange(1000)) & (np.arange(1000) <= last))
    assert np.array_equal(first[rows], b.indices - (np.arange(b.nnz) - b.indptr[rows]))
    assert len(np.unique(d)) > 5                                     # varied block sizes
    w = matrices.banded(333)
    d = w.row_lengths()
    assert np.all(np.abs(w.indices - _rows_of_entries(w)) <= 16)
    assert np.all(d[16:-16] == 33) and d[0] == 17 and d[-1] == 17
    g = matrices.diagonal(77)
    assert np.all(g.row_lengths() == 1) and np.array_equal(g.indices, np.arange(77)) and np.all(g.data > 0)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_by_seed(name):
    make = matrices.MATRICES[name]
    a, b, c = make(400, seed=7), make(400, seed=7), make(400, seed=8)
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("indptr", "indices", "data"))
    assert not (np.array_equal(a.indices, c.indices) and np.array_equal(a.data, c.data))


def test_with_index_round_trips_and_refuses_int32_where_too_large():
    m = matrices.circuit(500, seed=1)
    small = m.with_index(np.int32)
    assert small.indptr.dtype == small.indices.dtype == np.int32 and small.index_dtype == np.int32
    assert m.indices.dtype == np.int64                               # the original is left alone
    back = small.with_index("int64")
    assert back.indices.dtype == np.int64
    assert all(np.array_equal(getattr(back, f), getattr(m, f)) for f in ("indptr", "indices", "data"))
    assert back.name == m.name and back.spd == m.spd and back.shape == m.shape
    with pytest.raises(ValueError, match="int32 or int64"):
        m.with_index(np.int16)
    wide = matrices.Matrix("wide", np.array([0, 1]), np.array([2**31]), np.ones(1), 1, 2**31 + 1, False, "")
    with pytest.raises(ValueError, match="do not fit int32"):
        wide.with_index(np.int32)
    assert wide.with_index(np.int64).indices[0] == 2**31
    many, ones = (np.broadcast_to(v, (2**31,)) for v in (np.int64(0), np.float64(1)))   # 2^31 non-zeros, no memory
    big = matrices.Matrix("big", np.array([0, 2**31]), many, ones, 1, 1, False, "")
    with pytest.raises(ValueError, match="do not fit int32"):
        big.with_index(np.int32)


def test_stats_and_row_lengths():
    m = matrices.Matrix("t", np.array([0, 2, 2, 5, 6]), np.array([0, 3, 0, 1, 2, 3]), np.ones(6), 4, 4, False, "")
    assert list(m.row_lengths()) == [2, 0, 3, 1]
    assert m.stats() == {"mean": 1.5, "median": 1.5, "max": 3, "empty": 1}
    assert m.nnz == 6 and m.shape == (4, 4)


@pytest.mark.parametrize("name", NAMES)
def test_product_matches_dense(name):
    m = matrices.MATRICES[name](250, seed=9)
    x = np.random.default_rng(0).standard_normal(m.cols)
    nonempty = m.indptr[:-1] < m.indptr[1:]
    y = np.zeros(m.rows)
    y[nonempty] = np.add.reduceat(m.data * x[m.indices], m.indptr[:-1][nonempty])   # row by row, as CSR
    np.testing.assert_allclose(y, _dense(m) @ x, rtol=1e-12, atol=1e-12 * np.abs(m.data).max())


def test_main_prints_the_table():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "matrices.py"), "--rows", "200"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:8] == ["matrix", "rows", "nnz", "mean", "median", "max", "empty", "spd"]
    got = {line.split()[0]: line.split() for line in lines[2:]}
    assert list(got) == NAMES
    assert got["diagonal"][1:3] == ["200", "200"] and got["random_uniform"][7] == "False"


def test_the_row_mapping_on_the_set():
    """``runtime.csr.mapping`` with the lane-steps the checks count: the diagonal takes a lane a
    row, the circuit's rows of 2-6 groups of 4; the power-law graph's short rows of irregular
    lengths are streamed (its warps would idle on groups of lanes), as are rows of 16 or more."""
    from kfuse.runtime import csr
    chosen = {}
    for m in matrices.matrix_set(20_000, seed=1):
        d = m.row_lengths()
        slots = [int(v) for v in csr.lane_slots(d, np)]
        chosen[m.name] = csr.mapping(m.rows, m.nnz, int(d.max()), float(np.median(d)), slots)[0]
    assert chosen == {name: {"diagonal": 1, "circuit": 4}.get(name, 0) for name in NAMES}, chosen
