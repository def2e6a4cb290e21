"""CSR (compressed sparse row) matrices as program inputs: what a ``csr`` input may be, its
arrays read without copying, its structure checked, and the row mapping chosen from its row
lengths.

Accepted for a ``csr`` input (scripts, ``kfuse.compile``, ``@kfuse.jit``, loops):

* a ``cupyx.scipy.sparse.csr_matrix`` (int32 indices);
* a torch sparse CSR CUDA tensor (``layout=torch.sparse_csr``; int32 or int64 indices);
* a :class:`kfuse.CSR` (``kfuse.CSR(indptr, indices, data, shape)``) or a plain tuple
  ``(indptr, indices, data, shape)`` of CUDA arrays (CuPy arrays or torch tensors).

A SciPy (host) matrix is refused with the way to move it to the GPU.  Index arrays are int32 or
int64, both compiled into every kernel (``KfCsr::wide`` picks one, uniformly, at run time); the
values have the program's dtype.

Checks.  Shapes and dtypes are checked on every new binding (host-side).  The structure --
``indptr[0] == 0``, ``indptr[rows] == nnz``, every row pointer in ``[0, nnz]``, row pointers
non-decreasing, every column index in ``[0, cols)`` -- takes reductions on the GPU and one
synchronisation, so it runs when a binding is made and again only for a matrix not checked before
(a fed-back loop over one matrix checks it once; values may change freely: they need no check).
A binding remembers the matrices it checked by their index arrays' pointers (``Checks``), each
only while the objects that own those arrays live: a new matrix that the memory pool gave a
dropped one's addresses is checked again.  Arrays changed in place behind the same pointers are
not checked again; the kernels still read a column outside ``[0, cols)`` as 0 instead of reading
outside x (``kf_gather``), and row pointers are read only inside ``[0, rows]``.  Column indices
need not be sorted within a row.

Row mapping (docs/design.md, "Sparse mat-vec"): the same reductions give the mean and the longest
row length, and the median row length.  The typical row length is the smaller of the mean and the
median (a few very long rows must not set it).  Where the power of two nearest it is at least
``STREAM_LANES`` (rows of about 6 entries or more), ``lanes`` is 0: each warp streams its 8 rows'
entries, all in flight at once, whatever their lengths.  Shorter rows take ``lanes`` (that power
of two, 1 to 4) threads a row, where that costs less than streaming them: a warp of groups of
lanes steps until its longest row is done, so the lane-steps its warps take (``lane_slots``, long
rows left out) are weighed against the entries plus ``STREAM_ROW`` a row, what a streamed warp
spends (both in entries loaded by a lane); rows of irregular lengths (a power-law graph's) are
streamed, at a cost that does not depend on the lengths.  Rows longer than ``long_row`` (the
larger of 256 and 8 times the typical length; set only where such a row exists, 0: none) are
summed before each kernel that reads A x, by a pre-pass of a block per 4096 entries
(``kf_spmv_long_rows``, sparse.cuh) into a buffer the kernel reads (``LongRows``), so that a row of
a million entries is spread over the GPU instead of left to one instance.  Their pieces are found
when the matrix is checked.
"""
from __future__ import annotations

import math
import sys
import weakref
from typing import Any, NamedTuple, Sequence

import numpy as np

from ..errors import LaunchError
from .args import adapt, facts, torch_tensor_type
from .gpu import cupy

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
PARTS = ("indptr", "indices", "data")
LONG_MIN = 256          # rows at most this long always stay with one group of lanes
LONG_FACTOR = 8         # ... and rows at most this many times the mean
STREAM_LANES = 8        # rows whose groups would be this wide or wider are streamed instead
STREAM_ROW = 4          # a streamed row's cost beyond its entries, in entries (benchmarks/sparse.py --sweep-lanes)
SHORT_LANES = (1, 2, 4)     # the lanes a row ``mapping`` may choose (below STREAM_LANES)
LONG_PIECE = 4096       # entries of a long row one block of its pre-pass sums


class CSR(NamedTuple):
    """A CSR matrix given by its arrays (CUDA arrays: CuPy or torch): ``indptr`` (rows + 1 row
    pointers), ``indices`` (column of each non-zero), ``data`` (its value), ``shape`` (rows,
    columns)."""
    indptr: Any
    indices: Any
    data: Any
    shape: tuple[int, int]


def _scipy_hint(x, name: str) -> LaunchError | None:
    mod = type(x).__module__ or ""
    if mod.startswith("scipy.sparse"):
        return LaunchError(f"{name}: a SciPy sparse matrix lives in host memory; move it to the GPU "
                           "(cupyx.scipy.sparse.csr_matrix(A), or torch's A.to_sparse_csr().cuda())")
    if mod.startswith("cupyx.scipy.sparse") and getattr(x, "format", "csr") != "csr":
        return LaunchError(f"{name}: a cupyx sparse matrix in {x.format} format; pass A.tocsr()")
    return None


def _torch_csr(x) -> bool:
    tensor = torch_tensor_type()
    return tensor is not None and isinstance(x, tensor) and x.layout == sys.modules["torch"].sparse_csr


def is_csr(x) -> bool:
    """A sparse matrix (SciPy, cupyx, torch sparse, kfuse.CSR or a 4-tuple): taken as a csr input
    (``parts`` says what is wrong with one that cannot be), not as a dense array."""
    mod = type(x).__module__ or ""
    return (isinstance(x, CSR) or (type(x) is tuple and len(x) == 4)
            or mod.startswith(("scipy.sparse", "cupyx.scipy.sparse")) or "sparse" in str(getattr(x, "layout", "")))


def parts(x, name: str) -> CSR:
    """The four parts of a csr input as given (not adapted), or a LaunchError saying what a csr
    input may be."""
    hint = _scipy_hint(x, name)
    if hint is not None:
        raise hint
    if _torch_csr(x):
        if not x.is_cuda:
            raise LaunchError(f"{name}: torch sparse CSR tensor is on {x.device}; move it to the GPU (.cuda())")
        if x.dim() != 2:
            raise LaunchError(f"{name}: a batched or hybrid sparse CSR tensor (shape {tuple(x.shape)}); "
                              "pass one 2-D matrix")
        return CSR(x.crow_indices(), x.col_indices(), x.values(), (int(x.shape[0]), int(x.shape[1])))
    if isinstance(x, CSR):
        return x
    if all(hasattr(x, a) for a in ("indptr", "indices", "data", "shape")):      # cupyx csr_matrix
        return CSR(x.indptr, x.indices, x.data, tuple(x.shape))
    if isinstance(x, tuple) and len(x) == 4:
        return CSR(*x)
    raise LaunchError(f"{name}: expected a CSR matrix (cupyx.scipy.sparse.csr_matrix, a torch sparse CSR "
                      f"CUDA tensor, or kfuse.CSR(indptr, indices, data, shape)), got {type(x).__name__}")


def shape_of(shape) -> tuple[int, int] | None:
    """(rows, columns) of a CSR matrix's ``shape`` -- a tuple or list of two integers (Python's
    or NumPy's; not bools, which are ints to Python, nor floats), each at least 1 -- or None where
    it is not such a shape.  The one rule of binding (``adapt_csr``) and tracing (the jit's)."""
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        return None
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1 for s in shape):
        return None
    return int(shape[0]), int(shape[1])


def adapt_csr(x, name: str) -> CSR:
    """A csr input's arrays adapted (CuPy or torch, zero copy) and their shapes and dtypes checked
    against each other (not yet against the program: ``check``)."""
    c = parts(x, name)
    shape = c.shape
    if shape_of(shape) is None:
        raise LaunchError(f"{name}: shape must be (rows, columns) of positive integers, got {shape!r:.80}")
    arrays = [adapt(a, f"{name}.{p}") for a, p in zip(c[:3], PARTS)]
    got = [facts(a) for a in arrays]
    for (shp, dt, strides, _, _), p in zip(got, PARTS):
        if len(shp) != 1:
            raise LaunchError(f"{name}.{p}: expected a 1-D array, got shape {shp}")
        if shp[0] > 1 and strides[0] != dt.itemsize:
            raise LaunchError(f"{name}.{p}: array is not contiguous; pass a contiguous copy")
    rows, cols = int(shape[0]), int(shape[1])
    (ps, pdt, *_), (is_, idt, *_), (ds, _, *_) = got
    if ps[0] != rows + 1:
        raise LaunchError(f"{name}.indptr: {ps[0]} entries, a CSR matrix of {rows} rows has {rows + 1}")
    for dt, p in ((pdt, "indptr"), (idt, "indices")):
        if dt not in INDEX_DTYPES:
            raise LaunchError(f"{name}.{p}: dtype {dt}; CSR index arrays are int32 or int64")
    if pdt != idt:
        raise LaunchError(f"{name}: indptr is {pdt} but indices is {idt}; give both one integer type")
    if is_[0] != ds[0]:
        raise LaunchError(f"{name}: {is_[0]} column indices but {ds[0]} values")
    if len({g[3] for g in got}) != 1:
        raise LaunchError(f"{name}: its arrays are on different GPUs")
    return CSR(arrays[0], arrays[1], arrays[2], (rows, cols))


def check(name: str, c: CSR, dtype: np.dtype, device: int | None, first: str) -> tuple[int, int, int]:
    """(rows, cols, nnz) of an adapted csr input, its values' dtype and device checked against the
    program's and the call's."""
    _, vdt, _, dev, _ = facts(c.data)
    if vdt != dtype:
        raise LaunchError(f"{name}.data: dtype is {vdt}, the program was compiled for {dtype} "
                          f"(convert the values with .astype({dtype.name}) or compile with dtype={vdt.name!r})")
    if device is not None and dev != device:
        raise LaunchError(f"{name} is on GPU {dev} but {first} is on GPU {device}; put every array of a call "
                          "on one GPU")
    return c.shape[0], c.shape[1], facts(c.indices)[0][0]


def facts_of(c: CSR) -> tuple:
    """``args.facts``'s tuple for a csr input: (rows, cols, nnz), the values' dtype, contiguous
    strides, device, the row pointers' address."""
    _, vdt, _, dev, _ = facts(c.data)
    return ((c.shape[0], c.shape[1], facts(c.indices)[0][0]), vdt, (), dev, facts(c.indptr)[4])


def index_itemsize(c: CSR) -> int:
    return facts(c.indices)[1].itemsize


def pointers(c: CSR) -> list[int]:
    return [facts(a)[4] for a in c[:3]]


def fast_key(x) -> tuple[tuple, list[int], bool] | None:
    """(signature key, the three pointers, torch?) of a csr input on the fast path (a cupyx matrix,
    a torch sparse CSR tensor or a CSR of CuPy arrays), or None (the slow path adapts it)."""
    cp = cupy()
    if _torch_csr(x) and x.is_cuda and x.dim() == 2:
        a, b, d = x.crow_indices(), x.col_indices(), x.values()
        return (("csr", tuple(x.shape), b.shape[0], b.dtype, d.dtype, x.device),
                [a.data_ptr(), b.data_ptr(), d.data_ptr()], True)
    c = x if isinstance(x, CSR) else x if type(x).__name__ == "csr_matrix" and hasattr(x, "indptr") else None
    if c is None:
        return None
    a, b, d = c.indptr, c.indices, c.data
    if not (type(a) is cp.ndarray and type(b) is cp.ndarray and type(d) is cp.ndarray):
        return None
    return (("csr", tuple(c.shape), b.shape[0], b.dtype, d.dtype, d.data.device_id, a.strides, b.strides, d.strides),
            [a.data.ptr, b.data.ptr, d.data.ptr], False)


LANES: int | None = None    # for measurements (benchmarks/sparse.py --sweep-lanes): every matrix checked
                            # while it is set takes these lanes (0: streamed); None: chosen by ``mapping``
LANE_CHOICES = (0, 1, 2, 4, 8, 16, 32)      # what the kernel takes (a group's lanes within a warp)


def mapping(rows: int, nnz: int, longest: int, median: float | None = None,
            slots: Sequence[int] | None = None) -> tuple[int, int]:
    """(lanes, long_row) for a matrix of these row statistics (see the module docstring); lanes 0:
    streamed rows.  ``slots``: what ``lane_slots`` counts, as numbers (per lanes of ``SHORT_LANES``
    the lane-steps their warps take, then the entries of the rows they take); without them short
    rows are taken as regular.  ``LANES``, where set, overrides the lanes."""
    typical = nnz / rows if median is None else min(nnz / rows, median)
    lanes = max(1, 2 ** round(math.log2(max(typical, 1.0))))
    threshold = max(LONG_MIN, int(LONG_FACTOR * typical))
    chosen = 0 if lanes >= STREAM_LANES else lanes
    if chosen and slots is not None and slots[SHORT_LANES.index(chosen)] > slots[-1] + STREAM_ROW * rows:
        chosen = 0
    if LANES is not None:
        if LANES not in LANE_CHOICES:
            raise LaunchError(f"runtime.csr.LANES is {LANES!r}; the kernel takes one of {LANE_CHOICES}")
        chosen = LANES
    return chosen, (threshold if longest > threshold else 0)


def lane_slots(d, cp) -> list:
    """Per lanes of ``SHORT_LANES``, the lane-steps the warps of a lanes kernel take over rows of
    lengths ``d`` (a CuPy array; rows longer than ``LONG_MIN`` left out, their pre-pass sums them):
    each warp holds 32 / lanes rows and steps until its longest row is done.  Then the entries of
    the rows kept; all as 0-d CuPy arrays (read with the checks' one synchronisation)."""
    kept = cp.where(d > LONG_MIN, 0, d)
    out = []
    for lanes in SHORT_LANES:
        group = 32 // lanes
        steps = -(-kept // lanes)
        pad = (-int(steps.shape[0])) % group
        if pad:
            steps = cp.concatenate([steps, cp.zeros(pad, steps.dtype)])
        out.append(steps.reshape(-1, group).max(axis=1).sum() * 32)
    return out + [kept.sum()]


class Checked(NamedTuple):
    """A checked matrix's row mapping and, where it has long rows, the buffers of their sums
    (``LongRows``)."""
    lanes: int
    long_row: int
    long: "LongRows | None"


def owners(x) -> tuple:
    """The objects whose life keeps a csr input's index arrays (row pointers, column indices) in
    memory: a torch sparse tensor itself (its ``crow_indices()`` are new views at every call), else
    the two arrays as given."""
    if _torch_csr(x):
        return (x,)
    c = parts(x, "A")
    return (c.indptr, c.indices)


def _ref(x):
    """A weak reference to ``x``, or a strong one (a function returning it) where ``x`` takes none."""
    try:
        return weakref.ref(x)
    except TypeError:
        return lambda: x


class Checks:
    """The matrices one csr input of a binding was checked with, by the pointers of their index
    arrays (row pointers, column indices), at most ``LIMIT`` of them.  An entry holds its matrix's
    ``owners`` weakly and stands only while they live: a new matrix whose arrays the memory pool
    returned at a dropped matrix's addresses is checked again, never given that matrix's row
    mapping and long-row buffers.  (Strong references would keep up to ``LIMIT`` dropped matrices'
    index arrays in GPU memory.)"""
    LIMIT = 16

    def __init__(self):
        self._entries: dict[tuple[int, int], tuple[Checked, tuple]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, at: tuple[int, int]) -> Checked | None:
        """The check of the matrix at ``at``, or None where none stands (never checked, or the
        matrix checked there is gone)."""
        entry = self._entries.get(at)
        if entry is None or any(r() is None for r in entry[1]):
            return None
        return entry[0]

    def put(self, at: tuple[int, int], owners: tuple, checked: Checked) -> bool:
        """Remember the check of the matrix at ``at``, owned by ``owners``.  True where entries were
        dropped (a gone matrix's, or all of them at ``LIMIT``): launches captured for them (CUDA
        graphs keyed by pointers) hold their row mapping and long-row buffers, and must go too."""
        gone = [k for k, (_, refs) in self._entries.items() if any(r() is None for r in refs)]
        for k in gone:
            del self._entries[k]
        dropped = bool(gone)
        if len(self._entries) >= self.LIMIT:
            self._entries.clear()
            dropped = True
        self._entries[at] = (checked, tuple(_ref(o) for o in owners))
        return dropped


class LongRows(NamedTuple):
    """The pieces of a matrix's long rows, as ``kf_spmv_long_rows`` (sparse.cuh) reads them (5 int64
    a piece: row, first entry, end entry, the row's first piece, its pieces), and what it writes: a
    sum per piece, a count per row (at its first piece, zero between calls) and the rows' sums
    (lsum, one entry per row of the matrix, only the long ones written)."""
    pieces: Any
    part: Any
    count: Any
    lsum: Any

    @property
    def grid(self) -> int:
        return int(self.pieces.shape[0])


def long_rows(ip, d, long_row: int, dtype) -> LongRows:
    """The pieces of the rows longer than ``long_row`` (``ip``: int64 row pointers, ``d``: row
    lengths, CuPy arrays on the current device) and the buffers their pre-pass writes."""
    cp = cupy()
    rows = cp.nonzero(d > long_row)[0]
    got = cp.stack([rows, ip[rows], ip[rows + 1]]).get().astype(np.int64)
    r, b, e = got
    n = -(-(e - b) // LONG_PIECE)
    first = np.repeat(np.cumsum(n) - n, n)
    k = np.arange(int(n.sum())) - first                       # piece within its row
    start = np.repeat(b, n) + k * LONG_PIECE
    table = np.stack([np.repeat(r, n), start, np.minimum(start + LONG_PIECE, np.repeat(e, n)), first, np.repeat(n, n)], 1)
    return LongRows(cp.asarray(np.ascontiguousarray(table, np.int64)), cp.empty(len(table), dtype),
                    cp.zeros(len(table), cp.uint32), cp.empty(int(d.shape[0]), dtype))


def validate(name: str, c: CSR, device: int, dtype) -> Checked:
    """Check the structure of an adapted csr input on the GPU (one synchronisation) and return its
    row mapping (``mapping``) and its long rows' pieces and buffers.  Raises a LaunchError naming
    what is wrong."""
    cp = cupy()
    rows, cols = c.shape
    with cp.cuda.Device(device):
        cp.cuda.Device(device).synchronize()        # arrays made on another stream are complete
        ip, ix = cp.asarray(c.indptr).astype(cp.int64), cp.asarray(c.indices)
        nnz = ix.shape[0]
        d = ip[1:] - ip[:-1]            # row lengths: they wrap where a pointer is outside [0, nnz]
        # column bounds; a matrix without entries (all rows empty: a zero matrix) has none to check
        cols_lo, cols_hi = ((ix.min().astype(cp.int64), ix.max().astype(cp.int64)) if nnz
                            else (cp.zeros((), cp.int64), cp.zeros((), cp.int64)))
        got = cp.stack([ip[0], ip[-1], ip.min(), ip.argmin(), ip.max(), ip.argmax(), d.min(), d.max(),
                        cols_lo, cols_hi, cp.median(d).astype(cp.int64), *lane_slots(d, cp)]).get()
    first, last, lowest, at_lowest, highest, at_highest, shortest, longest, lo, hi, median = (int(v) for v in got[:11])
    if first != 0:
        raise LaunchError(f"{name}: malformed CSR: indptr[0] is {first}, not 0")
    if last != nnz:
        raise LaunchError(f"{name}: malformed CSR: indptr[{rows}] is {last}, but there are {nnz} column indices")
    if lowest < 0 or highest > nnz:
        at, bad = (at_lowest, lowest) if lowest < 0 else (at_highest, highest)
        raise LaunchError(f"{name}: malformed CSR: indptr[{at}] is {bad}, outside [0, {nnz}] "
                          f"(row pointers run from 0 to the {nnz} column indices)")
    if shortest < 0:
        raise LaunchError(f"{name}: malformed CSR: the row pointers decrease (a row of {shortest} entries)")
    if lo < 0 or hi >= cols:
        bad = lo if lo < 0 else hi
        raise LaunchError(f"{name}: column index {bad} out of range for a matrix of {cols} columns")
    lanes, long_row = mapping(rows, nnz, longest, median, [int(v) for v in got[11:]])
    if not long_row:
        return Checked(lanes, 0, None)
    with cp.cuda.Device(device):
        return Checked(lanes, long_row, long_rows(ip, d, long_row, dtype))
