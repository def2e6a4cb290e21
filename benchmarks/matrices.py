"""A set of sparse (CSR) test matrices like the ones people have, generated here (NumPy only, no
downloads), for issue 58's sparse mat-vec and CG benchmarks (benchmarks/sparse.py ``--set``).

The synthetic bands of benchmarks/sparse.py have one row-length profile each (row lengths spread
evenly around a mean).  Matrices people bring have others, and a CSR mat-vec's row mapping is
chosen from exactly that profile, so the set covers the ones met in practice:

* ``fe3d_27``: the 27-point pattern of a hexahedral mesh of trilinear elements on a k^3 grid of
  nodes (27 entries in interior rows; 8 at the corners, 12 on edges, 18 on faces);
* ``fe2d_q2``: 9-node quadrilateral (Q2) elements on a k x k mesh, nodes of a (2k+1)^2 grid, two
  nodes coupled where they share an element: rows of 25 (element vertices), 15 (edge midpoints)
  and 9 (element centres) entries, fewer on the boundary;
* ``powerlaw_laplacian``: a graph Laplacian of a Chung-Lu random graph with power-law degrees
  (exponent 2.3): most rows short, a few very long (social and web graphs);
* ``circuit``: 2-6 entries a row from couplings between nearby nodes, plus a few supply/ground
  nodes, each touching 6-20% of all nodes: a few dense rows and the matching dense columns;
* ``block_diagonal``: dense diagonal blocks of 16-64 rows (multi-physics with a few unknowns per
  node, block preconditioners);
* ``banded``: every entry within 16 of the diagonal (a full band of 33: wide, uniform rows);
* ``diagonal``: one entry a row (the shortest rows: a mat-vec bound by its row pointers);
* ``random_uniform``: 8-16 columns a row anywhere (no locality in x; not symmetric).

Every generator takes a target size (rows; the grid kinds round it to their grid) and a seed, is
deterministic and vectorised (10^6 rows in a few seconds on one core at most), and returns a
``Matrix``: sorted, duplicate-free columns in every row, float64 values, int64 indices
(``Matrix.with_index(np.int32)`` for the other index type).  All but ``random_uniform`` are
symmetric positive definite by construction (``spd``): symmetric values (off the diagonal
``-w(i, j)`` with ``w`` a hash of the unordered pair, in [0.5, 1.5)) and a diagonal of the row's
sum of ``|w|`` plus a positive shift, so strictly diagonally dominant with a positive diagonal,
hence SPD by Gershgorin's theorem: the CG table can run on them.

    python benchmarks/matrices.py --rows 100000           # a table of the set, generation times
    PYTHONPATH=src python benchmarks/sparse.py --set out.md  # the benchmarks on it (GPU)

In code: ``for m in matrix_set(10**6): A = cupyx.scipy.sparse.csr_matrix((cupy.asarray(m.data),
cupy.asarray(m.indices), cupy.asarray(m.indptr)), shape=m.shape)``.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from collections import OrderedDict
from typing import Callable, Iterator

import numpy as np

INT32_MAX = 2**31 - 1
SHIFT = 0.01            # the diagonal's margin over the row's off-diagonal sum (smallest eigenvalue >= SHIFT)


@dataclasses.dataclass(frozen=True, eq=False)
class Matrix:
    """A CSR matrix of the set (NumPy arrays on the host; ``cupy.asarray`` moves them): ``indptr``
    (rows + 1 row pointers), ``indices`` (sorted, unique columns within each row), ``data``
    (float64), ``spd`` (symmetric positive definite by construction), ``description`` (what it
    models, in a line)."""
    name: str
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    rows: int
    cols: int
    spd: bool
    description: str

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.cols

    @property
    def index_dtype(self) -> np.dtype:
        return self.indices.dtype

    def with_index(self, dtype) -> "Matrix":
        """A copy with ``indptr`` and ``indices`` of ``dtype`` (int32 or int64).  int32 is refused
        (ValueError) where the row pointers (up to nnz) or the columns would not fit."""
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError(f"{self.name}: index dtype {dt}; CSR indices here are int32 or int64")
        if dt == np.int32 and (self.nnz > INT32_MAX or self.cols > INT32_MAX):
            raise ValueError(f"{self.name}: {self.nnz} non-zeros and {self.cols} columns do not fit int32 "
                             f"indices (at most {INT32_MAX}); use int64")
        return dataclasses.replace(self, indptr=self.indptr.astype(dt), indices=self.indices.astype(dt))

    def row_lengths(self) -> np.ndarray:
        return np.diff(self.indptr).astype(np.int64)

    def stats(self) -> dict:
        """Mean, median and longest row length, and how many rows are empty."""
        d = self.row_lengths()
        return {"mean": float(d.mean()), "median": float(np.median(d)), "max": int(d.max()),
                "empty": int(np.count_nonzero(d == 0))}


# -- building blocks ----------------------------------------------------------------------------------
def _rng(seed: int, kind: int) -> np.random.Generator:
    """A generator per (seed, kind): the kinds' streams independent for one seed."""
    return np.random.default_rng([int(seed), kind])


def _check_rows(rows: int) -> int:
    rows = int(rows)
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    return rows


def _grid_pattern(lo: list[np.ndarray], hi: list[np.ndarray], reach: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) int64 of a pattern on a grid of shape (len(lo[0]), len(lo[1]), ...) (the
    first axis the slowest): the node at coordinates c couples with every node c' with
    lo[d][c[d]] <= c'[d] <= hi[d][c[d]] on every axis d (a box around it, at most ``reach`` away
    on each axis).  Offsets are visited in lexicographic order, which is the order of the
    neighbours' linear indices, so the columns come out sorted without a sort."""
    shape = [len(a) for a in lo]
    strides = np.cumprod([1] + shape[::-1])[:-1][::-1]          # row-major: the last axis is contiguous
    offs = np.arange(-reach, reach + 1)
    # per axis: may coordinate c take offset o?  (shape[d], 2 reach + 1) booleans
    ok = [(c[:, None] + offs >= l[:, None]) & (c[:, None] + offs <= h[:, None])
          for c, l, h in ((np.arange(k), l, h) for k, l, h in zip(shape, lo, hi))]
    mask = ok[0]
    lin = offs * strides[0]
    for d in range(1, len(shape)):                               # outer products, axis by axis
        mask = (mask[:, None, :, None] & ok[d][None, :, None, :]).reshape(mask.shape[0] * shape[d], -1)
        lin = (lin[:, None] + offs[None, :] * strides[d]).reshape(-1)
    n = mask.shape[0]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(mask.sum(axis=1), out=indptr[1:])
    indices = (np.arange(n, dtype=np.int64)[:, None] + lin[None, :])[mask]
    return indptr, indices


def _from_keys(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) int64 of the entries ``row * n + col`` in ``keys`` (any order, duplicates
    merged): one sort of the keys, no argsort."""
    keys = np.sort(keys)
    if keys.size:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    rows, cols = np.divmod(keys, n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols


def _symmetric_from_edges(u: np.ndarray, v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the symmetric pattern of the edges (u, v), both directions, plus the
    diagonal; self loops and repeated edges merged."""
    u, v = u.astype(np.int64), v.astype(np.int64)
    diag = np.arange(n, dtype=np.int64)
    return _from_keys(np.concatenate((u * n + v, v * n + u, diag * n + diag)), n)


def _hash_unit(keys: np.ndarray, seed: int, scratch: np.ndarray | None = None) -> np.ndarray:
    """Uniform [0, 1) floats, one per int64 key, from splitmix64: the same key gives the same
    number, so entries (i, j) and (j, i) get the same value without matching them up.  ``keys``
    is overwritten (it is the hash's state) and ``scratch``, of its size, used as a buffer: at
    10^7 entries and more, fresh temporaries (page faults) cost more than the arithmetic."""
    z = keys.view(np.uint64)
    t = np.empty_like(z) if scratch is None else scratch.view(np.uint64)
    with np.errstate(over="ignore"):
        z += np.uint64((0x9E3779B97F4A7C15 * (int(seed) + 1)) % 2**64)
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            np.right_shift(z, np.uint64(shift), out=t)
            z ^= t
            z *= np.uint64(mult)
        np.right_shift(z, np.uint64(31), out=t)
        z ^= t
    z >>= np.uint64(11)
    u = z.astype(np.float64)
    u *= 2.0**-53
    return u


def _sdd_values(indptr: np.ndarray, indices: np.ndarray, seed: int, shift: float = SHIFT) -> np.ndarray:
    """Values of a symmetric, strictly diagonally dominant matrix with a positive diagonal (so
    SPD) on a symmetric pattern that holds the whole diagonal: off the diagonal -w(i, j), w in
    [0.5, 1.5) a hash of the unordered pair {i, j} (a weighted graph Laplacian); on it the row's
    sum of w plus ``shift``."""
    n = indptr.shape[0] - 1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    on = np.flatnonzero(rows == indices)
    if on.size != n:
        raise ValueError("the pattern must hold every diagonal entry")
    key = np.minimum(rows, indices)                              # the pair (lo, hi) as lo * n + hi
    high = np.maximum(rows, indices)
    key *= n
    key += high
    w = _hash_unit(key, seed, scratch=high)
    del key, high
    w += 0.5
    w[on] = 0.0
    diag = np.bincount(rows, weights=w, minlength=n)
    np.negative(w, out=w)
    w[on] = diag + shift                                         # on[i] is row i's diagonal entry
    return w


def _spd(name, indptr, indices, seed, description) -> Matrix:
    n = indptr.shape[0] - 1
    return Matrix(name, indptr, indices, _sdd_values(indptr, indices, seed), n, n, True, description)


# -- the kinds ----------------------------------------------------------------------------------------
def fe3d_27(rows: int, seed: int = 0) -> Matrix:
    """The 27-point pattern of trilinear hexahedral elements on a k^3 grid of nodes, k^3 about
    ``rows`` (k >= 2): a node couples with the nodes of the (up to 8) elements around it, i.e.
    every node at most one step away on each axis.  Rows of 27 inside, 18/12/8 on faces, edges and
    corners.  SPD values (module docstring)."""
    k = max(2, round(_check_rows(rows) ** (1 / 3)))
    c = np.arange(k)
    lo, hi = np.maximum(c - 1, 0), np.minimum(c + 1, k - 1)
    indptr, indices = _grid_pattern([lo] * 3, [hi] * 3, 1)
    return _spd("fe3d_27", indptr, indices, seed,
                f"3-D trilinear hexahedra, {k}^3 nodes: 27-point pattern (8-27 a row)")


def fe2d_q2(rows: int, seed: int = 0) -> Matrix:
    """9-node quadrilateral (Q2) elements on a k x k mesh, its nodes a (2k+1)^2 grid about
    ``rows`` (k >= 1); two nodes couple where they share an element.  Along one axis, a node at
    an odd coordinate (inside an element) sees that element's 3 nodes, one at an even coordinate
    (an element boundary) the 5 nodes of the two elements beside it (3 on the mesh's boundary);
    a row is the product of its two axes: 25 at element vertices, 15 at edge midpoints, 9 at
    element centres inside the mesh.  SPD values (module docstring)."""
    k = max(1, round((np.sqrt(_check_rows(rows)) - 1) / 2))
    c = np.arange(2 * k + 1)
    odd = c % 2 == 1
    lo = np.where(odd, c - 1, np.maximum(c - 2, 0))
    hi = np.where(odd, c + 1, np.minimum(c + 2, 2 * k))
    indptr, indices = _grid_pattern([lo, lo], [hi, hi], 2)
    return _spd("fe2d_q2", indptr, indices, seed,
                f"2-D Q2 quadrilaterals, {k}^2 elements, {2 * k + 1}^2 nodes (9/15/25 a row)")


def powerlaw_laplacian(rows: int, seed: int = 0, exponent: float = 2.3, mean_degree: float = 10.0) -> Matrix:
    """A weighted graph Laplacian (plus a small diagonal shift: SPD) of a Chung-Lu random graph
    whose expected degrees follow a power law of ``exponent``: node i (in a random order) has
    weight about (i + 1)^(-1 / (exponent - 1)), and rows * mean_degree / 2 edges join endpoints
    drawn in proportion to the weights (self loops and repeats merged).  A few rows are very long,
    most are short."""
    n = _check_rows(rows)
    if exponent <= 2:
        raise ValueError(f"exponent {exponent}: the weights' inversion below needs an exponent above 2")
    rng = _rng(seed, 3)
    edges = int(round(n * mean_degree / 2))
    # endpoints by inverting the weights' continuous CDF: density (x + 1)^-a on [0, n), a < 1,
    # whose integral up to x is ((x + 1)^b - 1) / b, b = 1 - a (a searchsorted into the discrete
    # CDF would take seconds of cache misses at 10^7 draws)
    b = 1.0 - 1.0 / (exponent - 1.0)
    x = rng.random(2 * edges)
    x *= (n + 1.0) ** b - 1.0
    x += 1.0
    np.power(x, 1.0 / b, out=x)
    ends = np.minimum(x.astype(np.int64) - 1, n - 1)
    del x
    label = rng.permutation(n)                                   # the heavy nodes anywhere
    u, v = label[ends[:edges]], label[ends[edges:]]
    indptr, indices = _symmetric_from_edges(u, v, n)
    return _spd("powerlaw_laplacian", indptr, indices, seed,
                f"Chung-Lu graph Laplacian, degree exponent {exponent}, mean degree ~{mean_degree:g}")


def circuit(rows: int, seed: int = 0, dense_nodes: tuple[int, int] = (4, 8),
            reach: tuple[float, float] = (0.06, 0.20)) -> Matrix:
    """A circuit-like matrix (nodal analysis): every node couples with 1 or 2 nodes up to 64
    places ahead (2-6 entries in most rows, the diagonal included), and 4-8 supply/ground nodes
    each couple with a random 6-20% of all nodes: a few dense rows and, the matrix being
    symmetric, the matching dense columns.  SPD values (module docstring)."""
    n = _check_rows(rows)
    rng = _rng(seed, 4)
    per = rng.integers(1, 3, n)                                  # 1 or 2 couplings ahead per node
    u = np.repeat(np.arange(n, dtype=np.int64), per)
    v = np.minimum(u + rng.integers(1, 65, u.size), n - 1)       # the last nodes: self loops, merged
    hubs = rng.choice(n, min(n, int(rng.integers(dense_nodes[0], dense_nodes[1] + 1))), replace=False)
    hu, hv = [u], [v]
    for h in hubs:
        size = min(n, int(np.ceil(rng.uniform(*reach) * n)))
        hv.append(rng.choice(n, size, replace=False).astype(np.int64))
        hu.append(np.full(size, h, np.int64))
    indptr, indices = _symmetric_from_edges(np.concatenate(hu), np.concatenate(hv), n)
    return _spd("circuit", indptr, indices, seed,
                f"circuit-like: local couplings, {len(hubs)} supply/ground nodes of "
                f"{reach[0]:.0%}-{reach[1]:.0%} of the nodes")


def block_diagonal(rows: int, seed: int = 0, sizes: tuple[int, int] = (16, 64)) -> Matrix:
    """Dense diagonal blocks of random sizes in ``sizes`` (the last one cut to make ``rows``
    rows), each block's rows holding all its columns.  SPD values (module docstring)."""
    n = _check_rows(rows)
    rng = _rng(seed, 5)
    b = rng.integers(sizes[0], sizes[1] + 1, n // sizes[0] + 1)
    ends = np.cumsum(b)
    b = b[: int(np.searchsorted(ends, n)) + 1]
    b[-1] -= int(b.sum()) - n                                    # cut the last block to fit
    starts = np.concatenate(([0], np.cumsum(b)[:-1]))
    length = np.repeat(b, b)                                     # each row: its block's size
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(length, out=indptr[1:])
    # entry e of row r sits at column first(r) + (e - indptr[r]), first(r) its block's first column
    indices = np.arange(indptr[-1], dtype=np.int64)
    indices -= np.repeat(indptr[:-1] - np.repeat(starts, b), length)
    return _spd("block_diagonal", indptr, indices, seed,
                f"{len(b)} dense diagonal blocks of {sizes[0]}-{sizes[1]} rows")


def banded(rows: int, seed: int = 0, half_width: int = 16) -> Matrix:
    """A full band: every entry within ``half_width`` of the diagonal (2 half_width + 1 a row,
    fewer in the first and last rows).  SPD values (module docstring)."""
    n = _check_rows(rows)
    c = np.arange(n)
    indptr, indices = _grid_pattern([np.maximum(c - half_width, 0)], [np.minimum(c + half_width, n - 1)], half_width)
    return _spd("banded", indptr, indices, seed, f"full band of half-width {half_width}")


def diagonal(rows: int, seed: int = 0) -> Matrix:
    """One entry a row, on the diagonal, uniform in [1, 2) (SPD)."""
    n = _check_rows(rows)
    idx = np.arange(n + 1, dtype=np.int64)
    return Matrix("diagonal", idx, idx[:-1].copy(), 1.0 + _rng(seed, 7).random(n), n, n, True,
                  "diagonal only, one entry a row")


def random_uniform(rows: int, seed: int = 0, per_row: tuple[int, int] = (8, 16)) -> Matrix:
    """8-16 columns a row (``per_row``), uniform over all columns (repeats merged, so a row may
    have fewer at small sizes), standard normal values: no locality, not symmetric."""
    n = _check_rows(rows)
    rng = _rng(seed, 8)
    k = rng.integers(per_row[0], per_row[1] + 1, n)
    r = np.repeat(np.arange(n, dtype=np.int64), k)
    indptr, indices = _from_keys(r * n + rng.integers(0, n, r.size), n)
    return Matrix("random_uniform", indptr, indices, rng.standard_normal(indices.size), n, n, False,
                  f"{per_row[0]}-{per_row[1]} uniformly random columns a row, not symmetric")


MATRICES: "OrderedDict[str, Callable[..., Matrix]]" = OrderedDict(
    (f.__name__, f) for f in (fe3d_27, fe2d_q2, powerlaw_laplacian, circuit, block_diagonal, banded,
                              diagonal, random_uniform))


def matrix_set(rows: int, seed: int = 0, names=None) -> Iterator[Matrix]:
    """Every matrix of the set (or those in ``names``, in the set's order) at about ``rows`` rows,
    one at a time (a set of 10^6-row matrices takes a few GB if held at once)."""
    wanted = list(MATRICES) if names is None else list(names)
    unknown = [w for w in wanted if w not in MATRICES]
    if unknown:
        raise ValueError(f"unknown matrices {unknown}; the set has {list(MATRICES)}")
    for name in MATRICES:
        if name in wanted:
            yield MATRICES[name](rows, seed)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="The sparse test matrices of issue 58's benchmarks (NumPy): each "
                                 "one's rows, non-zeros, row lengths, SPD or not, and generation time.")
    ap.add_argument("--rows", type=int, default=1_000_000, help="target rows of each matrix (default 10^6)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated names of the set (default: all)")
    args = ap.parse_args(argv)
    names = None if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    head = (f"{'matrix':<20} {'rows':>10} {'nnz':>12} {'mean':>8} {'median':>7} {'max':>9} {'empty':>6} "
            f"{'spd':>5} {'gen s':>7}")
    print(head)
    print("-" * len(head))
    t = time.perf_counter()
    for m in matrix_set(args.rows, args.seed, names):
        dt = time.perf_counter() - t
        s = m.stats()
        print(f"{m.name:<20} {m.rows:>10} {m.nnz:>12} {s['mean']:>8.2f} {s['median']:>7.1f} {s['max']:>9} "
              f"{s['empty']:>6} {str(m.spd):>5} {dt:>7.2f}   {m.description}")
        del m
        t = time.perf_counter()


if __name__ == "__main__":
    main()
