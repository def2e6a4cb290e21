// ---------------------------------------------------------------------------------------
// kfuse sparse prelude: included after prelude.cuh in modules whose kernels read a csr matrix
// (modules without one are unchanged).
// ---------------------------------------------------------------------------------------
// A CSR (compressed sparse row) matrix, read through this view only: row pointers (rows + 1
// entries), column indices and values (nnz entries each).  The index arrays are 32-bit or 64-bit
// integers as the caller's arrays are (wide = 1: 64-bit); a routine branches on it once, uniformly,
// and runs code specialised for the type (start<I>, col<I>).  lanes (0: each warp streams its 8
// rows; else threads per row, a power of two up to 32) and long_row (rows longer than this are
// summed by a whole instance; 0: no such row) are chosen per binding from the row lengths
// (runtime/csr.py).  The binding has checked the structure
// (runtime/csr.py: monotone row pointers, columns inside [0, cols)); gather() still reads a column
// outside [0, n) as 0 rather than outside the vector.
struct KfCsr {
    const void* __restrict__ ptr;
    const void* __restrict__ idx;
    const real* __restrict__ val;
    long long rows, cols, nnz;
    int wide, lanes;
    long long long_row;
    template <class I> KF_DEVICE long long start(long long r) const { return (long long)static_cast<const I*>(ptr)[r]; }
    template <class I> KF_DEVICE long long col(long long k) const { return (long long)static_cast<const I*>(idx)[k]; }
    KF_DEVICE real value(long long k) const { return val[k]; }
};

// x[c] of a vector read anywhere (a gather), through the read-only data cache; a c outside [0, n)
// (negative ones included) reads 0
KF_DEVICE real kf_gather(const KfVec& x, long long c) {
    return (unsigned long long)c < (unsigned long long)x.n ? __ldg(x.p + c) : real(0);
}
