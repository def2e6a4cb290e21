"""Trust audit (issue 60) of CSR inputs on the CPU: a binding remembers the matrices it checked only
while they live (finding 2: a new matrix whose arrays the memory pool returned at a dropped one's
addresses took that matrix's row mapping unchecked), and row pointers outside [0, nnz] are a clean
error (finding 7: wrapped differences passed the monotone check and ended in a MemoryError).

The runtime's CuPy calls run on NumPy here (``NumPyCuPy``)."""

import gc
import types
import weakref
from pathlib import Path

import numpy as np
import pytest

import kfuse
from kfuse.errors import LaunchError
from kfuse.runtime import args as runtime_args
from kfuse.runtime import csr
from kfuse.runtime.binding import Binding


ROOT = Path(__file__).resolve().parent.parent
SPARSE_CU = ROOT / "src" / "kfuse" / "blas" / "sparse.cu"
SPARSE_CUH = ROOT / "src" / "kfuse" / "codegen" / "sparse.cuh"
PRELUDE = ROOT / "src" / "kfuse" / "codegen" / "prelude.cuh"


# -- CuPy on NumPy: the calls runtime/csr.py and runtime/args.py make ------------------------------

class _Array(np.ndarray):
    """A NumPy array dressed as a CuPy one: ``.get()``, ``.device.id``, ``.data.ptr``."""

    def get(self):
        return np.asarray(self)

    @property
    def device(self):
        return types.SimpleNamespace(id=0)

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


def _on(x) -> _Array:
    return np.asarray(x).view(_Array)


class _Device:
    def __init__(self, i=0):
        self.id = i

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


NumPyCuPy = types.SimpleNamespace(
    ndarray=_Array, int64=np.int64, uint32=np.uint32, cuda=types.SimpleNamespace(Device=_Device),
    asarray=_on, stack=lambda xs: _on(np.stack([np.asarray(x) for x in xs])), median=np.median,
    nonzero=np.nonzero, zeros=lambda n, dt: _on(np.zeros(n, dt)), empty=lambda n, dt: _on(np.empty(n, dt)))


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(csr, "cupy", lambda: NumPyCuPy)
    monkeypatch.setattr(runtime_args, "cupy", lambda: NumPyCuPy)
    return NumPyCuPy


def matrix(indptr, indices, cols, dtype=np.int64):
    """A kfuse.CSR of stand-in arrays (values 1)."""
    return kfuse.CSR(_on(np.asarray(indptr, dtype)), _on(np.asarray(indices, dtype)),
                     _on(np.ones(len(indices))), (len(indptr) - 1, cols))


# -- finding 7: row pointers outside [0, nnz] ---------------------------------------------------------

@pytest.mark.parametrize("indptr, words", [
    ([0, 2 ** 62, -2 ** 63 + 10, 5], "indptr[2] is -9223372036854775798, outside [0, 5]"),   # differences wrap
    ([0, 9, 3, 3], "indptr[1] is 9, outside [0, 3]"),
    ([0, 2 ** 63 - 1, 4, 4, 4], "indptr[1] is 9223372036854775807, outside [0, 4]"),
])
def test_row_pointers_outside_the_entries_are_a_clean_error(gpu, indptr, words):
    """Issue 60, finding 7: ``[0, 2^62, -2^63 + 10, 5]`` has row lengths 2^62, 2^62 + 10 and
    2^63 - 5 in wrapping int64: it passed the monotone check, and its "long rows" asked NumPy for
    32 PiB (a MemoryError).  Every row pointer must lie in [0, nnz]: a LaunchError naming it."""
    nnz = indptr[-1]
    A = csr.adapt_csr(matrix(indptr, np.arange(nnz) % 3, 3), "A")
    with pytest.raises(LaunchError) as e:
        csr.validate("A", A, 0, np.dtype(np.float64))
    assert str(e.value).startswith("A: malformed CSR: ") and words in str(e.value)


def test_good_row_pointers_still_give_the_row_mapping(gpu):
    lengths = [1] * 63 + [577]                     # one long row: its pieces found
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    got = csr.validate("A", csr.adapt_csr(matrix(indptr, np.arange(640) % 64, 64), "A"), 0, np.dtype(np.float64))
    assert (got.lanes, got.long_row) == (1, 256) and got.long is not None and got.long.grid == 1
    assert got.long.pieces.get().tolist() == [[63, 63, 640, 0, 1]]


# -- finding 2: a dropped matrix's addresses, reused ---------------------------------------------------

ROWS, NNZ, COLS = 64, 640, 64
EVEN = np.arange(0, NNZ + 1, NNZ // ROWS)                           # rows of 10: streamed, no long row
SKEWED = np.concatenate([[0], np.cumsum([577] + [1] * 63)])         # one row of 577 (long), 63 of 1


class Pool:
    """A memory pool's block, handing out new arrays (new objects) at the same addresses."""

    def __init__(self):
        self.block = np.zeros(2 * (ROWS + 1 + NNZ), np.int64)

    def matrix(self, indptr, indices):
        ip = self.block[:ROWS + 1].view(_Array)
        ix = self.block[ROWS + 1:ROWS + 1 + NNZ].view(_Array)
        ip[:], ix[:] = indptr, indices
        return kfuse.CSR(ip, ix, _on(np.ones(NNZ)), (ROWS, COLS))


def bound_to_one_csr_input(monkeypatch) -> tuple[Binding, list]:
    """A Binding with only what ``check_csr`` reads: one csr input A (slots A, A#indices, A#data),
    its captured graphs (one stale one), and the matrices ``validate`` was called with."""
    b = object.__new__(Binding)
    b.csr, b.array_inputs = ["A"], ["A", "A#indices", "A#data"]
    b.csr_checked, b.csr_mapping, b.csr_long, b.csr_at = {"A": csr.Checks()}, {"A": [1, 0, 0, 0, 0, 0]}, {"A": None}, {}
    b.device, b.dtype = 0, np.dtype(np.float64)
    b.graphs = types.SimpleNamespace(execs={"a graph captured for the matrix before": None})
    b._compose = lambda: None
    validated = []
    real = csr.validate

    def counted(name, c, device, dtype):
        validated.append(weakref.ref(c.indptr))        # not the arrays themselves: they must be free to go
        return real(name, c, device, dtype)
    monkeypatch.setattr(csr, "validate", counted)
    return b, validated


def test_a_new_matrix_at_a_dropped_matrixs_addresses_is_checked_again(gpu, monkeypatch):
    """Issue 60, finding 2: the checks were kept by the (row pointers, column indices) pointer pair
    alone, so a new matrix the pool placed where a dropped one was took the dropped one's row
    mapping and long-row tables unchecked (and a malformed one was never refused).  An entry now
    stands only while its matrix's arrays live."""
    b, validated = bound_to_one_csr_input(monkeypatch)
    pool = Pool()
    A = pool.matrix(EVEN, np.arange(NNZ) % COLS)
    at = csr.pointers(csr.adapt_csr(A, "A"))
    b.check_csr({"A": A}, at)
    assert len(validated) == 1 and b.csr_mapping["A"][:2] == [0, 0]            # streamed rows
    b.check_csr({"A": A}, at)
    assert len(validated) == 1                                                 # alive: not checked again
    del A
    gc.collect()
    B = pool.matrix(SKEWED, np.arange(NNZ) % COLS)                             # the same addresses
    at_b = csr.pointers(csr.adapt_csr(B, "A"))
    assert at_b[:2] == at[:2]
    b.check_csr({"A": B}, at_b)
    assert len(validated) == 2 and validated[-1]() is B.indptr
    assert b.csr_mapping["A"][:2] == [1, 256] and b.csr_long["A"] is not None  # B's mapping, B's long row
    assert not b.graphs.execs                                                  # graphs holding A's mapping went
    del B
    gc.collect()
    bad = np.arange(NNZ) % COLS
    bad[5] = COLS                                                              # a column out of range
    with pytest.raises(LaunchError, match="column index 64 out of range"):
        b.check_csr({"A": pool.matrix(EVEN, bad)}, at)


def test_matrices_kept_alive_are_checked_once_each(gpu, monkeypatch):
    """Alternating between two live matrices (a loop's two operands) checks each once; their
    mappings are switched without a check."""
    b, validated = bound_to_one_csr_input(monkeypatch)
    A = matrix(EVEN, np.arange(NNZ) % COLS, COLS)
    B = matrix(SKEWED, np.arange(NNZ) % COLS, COLS)
    ats = [csr.pointers(csr.adapt_csr(M, "A")) for M in (A, B)]
    for _ in range(3):
        for M, at, mapping in zip((A, B), ats, ([0, 0], [1, 256])):
            b.check_csr({"A": M}, at)
            assert b.csr_mapping["A"][:2] == mapping
    assert len(validated) == 2 and b.graphs.execs                              # no entry dropped


def test_checks_hold_their_matrices_weakly(gpu):
    """The cache keeps no dropped matrix's index arrays in memory (a strong reference would keep up
    to Checks.LIMIT of them), and an object that takes no weak reference is held strongly."""
    checks, A = csr.Checks(), matrix(EVEN, np.arange(NNZ) % COLS, COLS)
    owners = csr.owners(A)
    assert owners[0] is A.indptr and owners[1] is A.indices
    checks.put((1, 2), owners, csr.Checked(0, 0, None))
    assert checks.get((1, 2)) == csr.Checked(0, 0, None)
    del A, owners
    gc.collect()
    assert checks.get((1, 2)) is None
    assert checks.put((3, 4), ([1],), csr.Checked(1, 0, None))                 # the dead entry dropped
    assert len(checks) == 1 and checks.get((3, 4)) == csr.Checked(1, 0, None)  # a list: no weak reference
