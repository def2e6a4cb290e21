"""Trust audit (issue 60) of CSR inputs on the CPU: a binding remembers the matrices it checked only
while they live (finding 2: a new matrix whose arrays the memory pool returned at a dropped one's
addresses took that matrix's row mapping unchecked), row pointers outside [0, nnz] are a clean
error (finding 7: wrapped differences passed the monotone check and ended in a MemoryError), a
warp streaming rows of int64 indices keeps its offsets in 64 bits (finding 3: 8 rows of 2^28
entries summed to 0), and the sparse CG example checks its solutions in seconds (finding 20).

The runtime's CuPy calls run on NumPy here (``NumPyCuPy``); the streamed mat-vec of
``blas/sparse.cu`` is built for the host with nvcc and run by 32 threads standing for a warp."""
from __future__ import annotations

import contextlib
import gc
import io
import re
import subprocess
import sys
import time
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

from test_nvcc import nvcc_compile

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
    nonzero=np.nonzero, zeros=lambda n, dt: _on(np.zeros(n, dt)), empty=lambda n, dt: _on(np.empty(n, dt)),
    where=lambda c, a, b: _on(np.where(c, a, b)), concatenate=lambda xs: _on(np.concatenate([np.asarray(x) for x in xs])))


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


# -- finding 3: streamed rows of int64 indices past 2^31 entries ---------------------------------------

def _stream_function() -> str:
    return SPARSE_CU.read_text().split("KF_DEVICE void kf_spmv_stream(", 1)[1].split("\n}\n", 1)[0]


def test_streamed_rows_keep_their_offsets_in_the_index_type():
    """Issue 60, finding 3: kf_spmv_stream kept a warp's offsets from its first entry in ``int``; with
    int64 indices they are of the index type (64-bit), with int32 ones 32-bit (8 rows of int32
    indices hold fewer than 2^31 entries)."""
    body = _stream_function()
    assert "using O = I;" in body
    for decl in ("const O rel = (O)(bound - lo);",
                 "const O b = __shfl_sync(all, rel, j), e = __shfl_sync(all, rel, j + 1), hi = __shfl_sync(all, rel, 8);",
                 "for (O c0 = 0;;)", "O c1 = ", "const O lb = __shfl_sync(all, rel, r), le = __shfl_sync(all, rel, r + 1);",
                 "const O lb = __shfl_sync(all, rel, (__ffs(m) - 1) / 4);"):
        assert decl in body, decl
    assert not re.search(r"\bint (rel|b|e|hi|c0|c1|lb|le)\b", body)
    spmv_rows = SPARSE_CU.read_text().split("KF_DEVICE void spmv_rows(", 1)[1]
    assert re.search(r"if \(A\.wide\)\s+kf_spmv_stream<long long>\(", spmv_rows)      # int64 indices: O is 64-bit


def _extract(text: str, start: str) -> str:
    """The declaration of ``text`` that begins with ``start``, to its closing ``}`` at column 0."""
    i = text.index(start)
    j = text.index("\n}", i)
    return text[i:j + 3]


HARNESS = r"""
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sys/mman.h>
#include <thread>
#include <vector>

#define KF_DEVICE inline
#define KF_SUB 32
typedef REAL real;

// one warp: 32 threads meeting at every collective, as the warp's lanes do
struct Warp {
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    unsigned long long generation = 0;
    long long slot[32];
    void barrier() {
        std::unique_lock<std::mutex> lock(m);
        const unsigned long long g = generation;
        if (++arrived == 32) { arrived = 0; ++generation; cv.notify_all(); }
        else cv.wait(lock, [&] { return generation != g; });
    }
};
static Warp warp;
static thread_local int lane_id;

template <class T> T __shfl_sync(unsigned, T v, int src) {
    long long bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    warp.slot[lane_id] = bits;
    warp.barrier();
    T got;
    std::memcpy(&got, &warp.slot[src % 32], sizeof got);
    warp.barrier();
    return got;
}
template <class T> T __shfl_xor_sync(unsigned all, T v, int o) {
    long long bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    warp.slot[lane_id] = bits;
    warp.barrier();
    T got;
    std::memcpy(&got, &warp.slot[lane_id ^ o], sizeof got);
    warp.barrier();
    (void)all;
    return got;
}
unsigned __ballot_sync(unsigned, bool p) {
    warp.slot[lane_id] = p;
    warp.barrier();
    unsigned bits = 0;
    for (int l = 0; l < 32; ++l) bits |= warp.slot[l] ? 1u << l : 0u;
    warp.barrier();
    return bits;
}
void __syncwarp() { warp.barrier(); }
int __ffs(unsigned x) { return __builtin_ffs((int)x); }
template <class T> T __ldg(const T* p) { return *p; }

struct KfVec { real* p; long long n; };
KFIX
KFCSR
KFGATHER
SPARSE

struct Slab { real d[4][128]; real& at(int w, int k) { return d[w][k]; } };
struct Out { real d[32]; real& at(int r) { return d[r]; } };

// a warp of rows r < rows <= 8 (ptr[r] .. ptr[r + 1]; the warp's other rows past the matrix's
// end), entries k: column k % cols (of x[c] = c % 5 + 0.5), value k % 7 - 3 (every sum exact in
// float too); rows longer than long_row read lsum[r] = 1000 + r.  Only the rows' own entries are in
// memory (reserved address space elsewhere: a read outside them faults).
template <class I>
int check(const char* name, const std::vector<long long>& ptr, long long long_row) {
    const int rows = (int)ptr.size() - 1;
    const long long first = ptr[0], nnz = ptr[rows], cols = 96;
    const size_t span = (size_t)nnz * sizeof(I) + 8 * 4096, vspan = (size_t)nnz * sizeof(real) + 8 * 4096;
    char* ib = (char*)mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char* vb = (char*)mmap(nullptr, vspan, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ib == MAP_FAILED || vb == MAP_FAILED) { printf("%s: no address space\n", name); return 1; }
    I* idx = (I*)ib;
    real* val = (real*)vb;
    real x[96], lsum[32], want[32];
    for (int c = 0; c < 96; ++c) x[c] = c % 5 + 0.5;
    for (int r = 0; r < rows; ++r) {
        const long long b = ptr[r], e = ptr[r + 1];
        lsum[r] = 1000 + r;
        want[r] = 0;
        if (long_row > 0 && e - b > long_row) { want[r] = lsum[r]; continue; }
        if (e > b) {
            auto open = [](char* base, size_t from, size_t to) {
                from &= ~(size_t)4095;
                to = (to + 4095) & ~(size_t)4095;
                return mprotect(base + from, to - from, PROT_READ | PROT_WRITE) == 0;
            };
            if (!open(ib, b * sizeof(I), e * sizeof(I)) || !open(vb, b * sizeof(real), e * sizeof(real))) {
                printf("%s: mprotect failed\n", name);
                return 1;
            }
        }
        for (long long k = b; k < e; ++k) {
            idx[k] = (I)(k % cols);
            val[k] = (real)(k % 7 - 3);
            want[r] += val[k] * x[k % cols];
        }
    }
    std::vector<I> ip(rows + 1);
    for (int r = 0; r <= rows; ++r) ip[r] = (I)ptr[r];
    const KfCsr A{ip.data(), idx, val, rows, cols, nnz, sizeof(I) == 8, 0, long_row, lsum};
    const KfVec xv{x, cols};
    static Slab slab;
    static Out out;
    for (auto& o : out.d) o = -1;
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; ++l)
        lanes.emplace_back([&, l] {
            lane_id = l;
            const KfIx ix{l, 0, 0, 0};
            kf_spmv_stream<I>(ix, A, xv, slab, out);
        });
    for (auto& t : lanes) t.join();
    int bad = 0;
    for (int r = 0; r < rows; ++r)
        if (out.d[r] != want[r]) { printf("%s: row %d is %g, not %g\n", name, r, (double)out.d[r], (double)want[r]); ++bad; }
    munmap(ib, span);
    munmap(vb, vspan);
    (void)first;
    return bad;
}

int main() {
    const long long L = (1ll << 31) / 7 + 1;     // 7 long rows: the 8th starts past 2^31 entries
    const std::vector<long long> huge = {0, L, 2 * L, 3 * L, 4 * L, 5 * L, 6 * L, 7 * L, 7 * L + 300};
    const std::vector<long long> short_rows = {12345, 12345, 12350, 12650, 12651, 12780, 12908, 12945, 13205};
    const std::vector<long long> mixed = {7, 2007, 2017, 4017, 6017, 6020, 6020, 8020, 8070};
    int bad = check<long long>("int64, past 2^31 entries", huge, 1000);
    bad += check<long long>("int64, short rows", short_rows, 0);
    bad += check<int>("int32, short rows", short_rows, 0);
    bad += check<long long>("int64, long rows", mixed, 1000);
    bad += check<int>("int32, long rows", mixed, 1000);
PROFILES
    printf("%d\n", bad);
    return 0;
}
"""


def _stream_profiles(seed: int) -> list[tuple[list[int], int]]:
    """Row pointers of one warp's rows (1 to 8 of them, from a random first entry) and the long-row
    threshold (0: none): short, empty, power-law and chunk-straddling rows, long rows among them."""
    rng = np.random.default_rng(seed)
    out = []
    for case in range(24):
        rows = int(rng.choice([1, 3, 7, 8, 8, 8]))
        kind = case % 6
        if kind == 0:
            lengths = rng.integers(0, 9, rows)                      # short rows, empty ones among them
        elif kind == 1:
            lengths = np.minimum(rng.zipf(1.7, rows), 400)          # power law
        elif kind == 2:
            lengths = rng.integers(60, 70, rows)                    # rows around a float chunk's half
        elif kind == 3:
            lengths = rng.choice([0, 1, 127, 128, 129, 255, 257], rows)     # at the chunk edges
        elif kind == 4:
            lengths = np.zeros(rows, np.int64)                      # nothing but empty rows
        else:
            lengths = rng.integers(1, 6, rows)
            lengths[rng.integers(0, rows, max(1, rows // 8))] = rng.integers(300, 900)   # long rows among short
        long_row = 256 if kind in (1, 3, 5) else 0
        start = int(rng.integers(0, 5000))
        out.append(([start, *(start + np.cumsum(lengths)).tolist()], long_row))
    return out


@pytest.mark.parametrize("real", ["double", "float"])
def test_a_warp_streams_rows_past_2_to_the_31_entries_of_int64_indices(nvcc, tmp_path, real):
    """Issue 60, finding 3, run: kf_spmv_stream built for the host (sparse.cu as it is, its KfCsr
    from sparse.cuh) and run by 32 threads standing for a warp's lanes.  A warp whose 8th row
    starts past 2^31 entries after its first (7 long rows before it, summed by the pre-pass) sums
    that row; with int offsets it wrapped negative and the row summed to 0.  Short rows across
    chunk boundaries and long rows among short ones give the exact sums, int32 and int64; so do 24
    random profiles of 1 to 8 rows (the warp's other rows past the matrix's end), both index
    types, in both precisions (chunks of 128 float or 64 double entries)."""
    cuh, prelude = SPARSE_CUH.read_text(), PRELUDE.read_text()
    profiles = []
    for k, (ptr, long_row) in enumerate(_stream_profiles(60)):
        for index, ctype in (("int32", "int"), ("int64", "long long")):
            ptrs = ", ".join(f"{v}LL" for v in ptr)
            profiles.append(f'    bad += check<{ctype}>("profile {k}, {index}", {{{ptrs}}}, {long_row});')
    source = (HARNESS.replace("KFIX", _extract(prelude, "struct KfIx {"))
              .replace("KFCSR", _extract(cuh, "struct KfCsr {"))
              .replace("KFGATHER", _extract(cuh, "KF_DEVICE real kf_gather("))
              .replace("SPARSE", SPARSE_CU.read_text())
              .replace("REAL", real).replace("PROFILES", "\n".join(profiles)))
    cpp = tmp_path / "stream.cpp"
    cpp.write_text(source)
    exe = tmp_path / "stream"
    done = subprocess.run([nvcc, "-std=c++17", "-O2", "-Xcompiler", "-pthread", "-o", str(exe), str(cpp)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().splitlines()[-1] == "0", run.stdout + run.stderr


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_spmv_module_builds_with_64_bit_stream_offsets(nvcc, tmp_path, dtype):
    """The generated module of a CG step over a CSR matrix carries the changed kf_spmv_stream (both
    index types instantiated by spmv_rows) and builds with warnings as errors."""
    text = kfuse.compile("csr A;\nvector p, q;\nscalar pq;\ninput A, p;\nq = spmv(A, p);\npq = dot(p, q);\n"
                         "return q, pq;\n", dtype=dtype, calibration=False, tuned=False).cuda_source
    assert "using O = I;" in text and "kf_spmv_stream<long long>(" in text and "kf_spmv_stream<int>(" in text
    nvcc_compile(nvcc, text, tmp_path, f"spmv_{dtype}")


# -- finding 20: the sparse CG example's reference --------------------------------------------------

def _host_cg(A, b, x=None, tol=1e-8, max_iterations=1000):
    """sparse_cg.sparse_cg's iteration on the host (NumPy, the arrays' own dtype)."""
    x = b * 0
    r = b.copy()
    p, rr, bb, k = r.copy(), r @ r, b @ b, 0
    while rr > tol * tol * bb and k < max_iterations:
        q = A @ p
        a = rr / (p @ q)
        x, r = x + a * p, r - a * q
        rn = r @ r
        p, rr, k = r + (rn / rr) * p, rn, k + 1
    return x, float(rr), k


def test_the_sparse_cg_example_checks_its_solutions_in_seconds(monkeypatch):
    """Issue 60, finding 20: the example's reference was SciPy's direct solve, which fills in on
    the skewed matrix (minutes).  Its demo, run with the GPU solve done on the host, now checks
    each solution's float64 residual with a sparse mat-vec: no direct solve, seconds."""
    import scipy.sparse.linalg as spla
    sys.path.insert(0, str(ROOT / "examples" / "solvers"))
    try:
        import sparse_cg
    finally:
        sys.path.remove(str(ROOT / "examples" / "solvers"))

    def no_direct_solve(*a, **k):
        raise AssertionError("the example solved directly (spsolve fills in: minutes)")
    monkeypatch.setattr(spla, "spsolve", no_direct_solve)
    monkeypatch.setattr(sparse_cg, "sparse_cg", _host_cg)
    sparse = types.ModuleType("cupyx.scipy.sparse")
    sparse.csr_matrix = lambda A: A
    scipy_ = types.ModuleType("cupyx.scipy")
    scipy_.sparse = sparse
    cupyx = types.ModuleType("cupyx")
    cupyx.scipy = scipy_
    cupy = types.ModuleType("cupy")
    cupy.asarray, cupy.asnumpy = np.asarray, np.asarray
    for name, mod in (("cupy", cupy), ("cupyx", cupyx), ("cupyx.scipy", scipy_), ("cupyx.scipy.sparse", sparse)):
        monkeypatch.setitem(sys.modules, name, mod)
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        sparse_cg.demo()
    assert time.perf_counter() - start < 30
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and all("||b - A x|| / ||b|| = " in line for line in lines), lines
    res = [float(line.split("= ")[-1].split()[0]) for line in lines]
    assert all(0 < r <= 1e-4 for r in res) and res[0] <= 1e-9 and res[2] <= 1e-9, res
    with pytest.raises(AssertionError, match="relative residual"):                # the check can fail
        A = sparse_cg.mesh_matrix(4)
        sparse_cg.check(A, np.zeros(A.shape[0]), np.ones(A.shape[0]), 1e-3)


def test_a_matrix_without_entries_checks_and_maps(gpu):
    """A zero matrix in CSR (every row empty, no column indices): the column-bound reductions of
    the check had no entries to reduce, a NumPy/CuPy ValueError; it is a valid matrix."""
    for rows in (1, 33):
        A = csr.adapt_csr(matrix([0] * (rows + 1), [], 5), "A")
        got = csr.validate("A", A, 0, np.dtype(np.float64))
        assert got.long is None and got.long_row == 0 and got.lanes in csr.LANE_CHOICES
        # the call's argument check takes it too (a zero product, not an error)
        assert csr.check("A", A, np.dtype(np.float64), None, "A") == (rows, 5, 0)
