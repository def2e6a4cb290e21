// ---------------------------------------------------------------------------------------
// kfuse sparse prelude: included after prelude.cuh in modules whose kernels read a csr matrix
// (modules without one are unchanged).
// ---------------------------------------------------------------------------------------
// A CSR (compressed sparse row) matrix, read through this view only: row pointers (rows + 1
// entries), column indices and values (nnz entries each).  The index arrays are 32-bit or 64-bit
// integers as the caller's arrays are (wide = 1: 64-bit); a routine branches on it once, uniformly,
// and runs code specialised for the type (start<I>, col<I>).  lanes (0: each warp streams its 8
// rows; else threads per row, a power of two up to 32) and long_row (rows longer than this were
// summed before the kernel, into lsum: kf_spmv_long_rows; 0: no such row) are chosen per binding
// from the row lengths (runtime/csr.py).  The binding has checked the structure
// (runtime/csr.py: monotone row pointers, columns inside [0, cols)); gather() still reads a column
// outside [0, n) as 0 rather than outside the vector.
struct KfCsr {
    const void* __restrict__ ptr;
    const void* __restrict__ idx;
    const real* __restrict__ val;
    long long rows, cols, nnz;
    int wide, lanes;
    long long long_row;
    const real* __restrict__ lsum;      // lsum[r]: row r of A x, for the rows longer than long_row
    template <class I> KF_DEVICE long long start(long long r) const { return (long long)static_cast<const I*>(ptr)[r]; }
    template <class I> KF_DEVICE long long col(long long k) const { return (long long)static_cast<const I*>(idx)[k]; }
    KF_DEVICE real value(long long k) const { return val[k]; }
};

// x[c] of a vector read anywhere (a gather), through the read-only data cache; a c outside [0, n)
// (negative ones included) reads 0
KF_DEVICE real kf_gather(const KfVec& x, long long c) {
    return (unsigned long long)c < (unsigned long long)x.n ? __ldg(x.p + c) : real(0);
}

// Rows longer than long_row summed before the kernel that reads A x (runtime/csr.py launches it):
// the binding cuts them into pieces of at most KF_LONG_PIECE entries, one block a piece, so a row
// of a million entries is spread over the GPU instead of one instance.  pieces[5 p ...]: the row,
// its first and end entry, the row's first piece and its number of pieces.  A block sums its piece
// into part[p]; the last of a row's blocks to finish (count[first] reaches the row's pieces) adds
// the row's parts in order -- the same sum every call -- into lsum[row] and re-arms the count.
#define KF_LONG_THREADS 256

template <class I>
KF_DEVICE real kf_long_piece(const I* __restrict__ idx, const real* __restrict__ val, const KfVec& x,
                             long long b, long long e) {
    real s = real(0);
    long long k = b + threadIdx.x;
    for (; k + 3 * KF_LONG_THREADS < e; k += 4 * KF_LONG_THREADS) {
        I c[4];
        real v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            c[u] = idx[k + u * KF_LONG_THREADS];
            v[u] = val[k + u * KF_LONG_THREADS];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) s += v[u] * kf_gather(x, (long long)c[u]);
    }
    for (; k < e; k += KF_LONG_THREADS) s += val[k] * kf_gather(x, (long long)idx[k]);
    return s;
}

extern "C" __global__ void __launch_bounds__(KF_LONG_THREADS)
kf_spmv_long_rows(const void* __restrict__ idx, const real* __restrict__ val, int wide, real* __restrict__ xp,
                  long long xn, const long long* __restrict__ pieces, real* part, unsigned* count,
                  real* __restrict__ lsum)
{
    __shared__ real sums[KF_LONG_THREADS / 32];
    __shared__ int last;
    const long long* pc = pieces + 5 * (long long)blockIdx.x;
    const long long row = pc[0], b = pc[1], e = pc[2], first = pc[3], n = pc[4];
    const KfVec x{xp, xn};
    real s = wide ? kf_long_piece(static_cast<const long long*>(idx), val, x, b, e)
                  : kf_long_piece(static_cast<const int*>(idx), val, x, b, e);
    s = kf_warp_sum(s);
    if (threadIdx.x % 32 == 0) sums[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        real t = real(0);
        for (int w = 0; w < KF_LONG_THREADS / 32; ++w) t += sums[w];
        last = 0;
        if (n == 1) {
            lsum[row] = t;
        } else {
            part[blockIdx.x] = t;
            __threadfence();                  // the part is visible before the count says so
            last = atomicAdd(count + first, 1u) == (unsigned)(n - 1);
        }
        if (last) {
            __threadfence();
            real total = real(0);
            for (long long q = first; q < first + n; ++q) total += __ldcg(part + q);
            lsum[row] = total;
            count[first] = 0u;                // re-armed for the next call
        }
    }
}
