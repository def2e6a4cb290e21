// BLAS-1 functions on the rows of a nested kernel's strips ("strip" variants, whole = ["j"]): beside
// matrix calls whose tiles span the rows whole (the strip variants of blas2_strip.cu: R rows x NC
// columns, threads 32 x BY), a vector call along the rows runs once per strip on the strip's R
// entries, which every thread holds (mapping "bcast", loaded and stored by srowvec_load /
// srowvec_store).  So a gemv's result is used in its kernel: a dot of it, or an axpy on it, reads
// no more than its R entries per strip (issue 18).  Every routine takes the variant's macros
// (BY, R, NC) as its leading template parameters.  Entries past the vector's end load as 0 and
// are not stored.

// out = alpha x
template <int BY, int R, int NC, class VX, class VO>
KF_DEVICE void scal_rows(const KfIx& ix, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) = alpha * x(r);
}

// out = alpha x + y
template <int BY, int R, int NC, class VX, class VY, class VO>
KF_DEVICE void axpy_rows(const KfIx& ix, VX& x, VY& y, VO& out, real alpha) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) = alpha * x(r) + y(r);
}

// out = alpha x + beta y
template <int BY, int R, int NC, class VX, class VY, class VO>
KF_DEVICE void axpby_rows(const KfIx& ix, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) = alpha * x(r) + beta * y(r);
}

// out = x + y
template <int BY, int R, int NC, class VX, class VY, class VO>
KF_DEVICE void vadd_rows(const KfIx& ix, VX& x, VY& y, VO& out) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) = x(r) + y(r);
}

// s += x . y over the strip's rows: every thread holds the same sum (mapping "thread", the same
// value in each); rows_dot_store adds it once per block
template <int BY, int R, int NC, class VX, class VY, class VS>
KF_DEVICE void dot_rows(const KfIx& ix, VX& x, VY& y, VS& s) {
    real d = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) d += x(r) * y(r);
    s(0) += d;
}

// the block's sum over its strips, added once by thread 0 (runs after the serial loop)
template <int BY, int R, int NC, class VS>
KF_DEVICE void rows_dot_store(const KfIx& ix, VS& s, const KfVec& g) {
    if (ix.tx == 0 && ix.ty == 0) g.add(0, s(0));
}
