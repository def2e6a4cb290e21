// Sparse matrix-vector product over a CSR matrix (sparse.toml): out = A x.
// An instance is the 32 rows ix.i * KF_SUB .. + 31, run by 128 threads (t = tx; warp t / 32).
//   spmv_rows      groups of A.lanes threads (a power of two) take the rows in turn: group g of
//                  G = 128 / lanes takes rows g, g + G, ...; its lanes read entries lane, lane +
//                  lanes, ... of the row (consecutive lanes, consecutive entries: coalesced) and
//                  sum them by shuffles.  Each warp's groups make the same number of passes, so
//                  every lane of a warp takes part in every shuffle.  Rows longer than A.long_row
//                  are left to the two routines below.
//   spmv_long      all 128 threads read each long row of the instance (entries t, t + 128, ...):
//                  one partial per warp, in part(r, warp)
//   spmv_long_sum  thread r < 32 adds its long row's four partials
// The index type is the caller's (int or long long, A.wide): each routine branches once.

template <class I, class VO>
KF_DEVICE void kf_spmv_rows(const KfIx& ix, const KfCsr& A, const KfVec& x, VO& out) {
    const int lanes = A.lanes, t = ix.tx;
    const int g = t / lanes, lane = t % lanes, G = 128 / lanes;
    for (int r = g; r < KF_SUB; r += G) {
        const long long row = ix.i * KF_SUB + r;
        long long b = 0, e = 0;
        if (row < A.rows) {
            b = A.start<I>(row);
            e = A.start<I>(row + 1);
        }
        const bool is_long = A.long_row > 0 && e - b > A.long_row;
        real s = real(0);
        if (!is_long) {
            for (long long k = b + lane; k < e; k += lanes) s += A.value(k) * kf_gather(x, A.col<I>(k));
        }
        for (int o = lanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && !is_long) out.at(r) = s;
    }
}

template <class VO>
KF_DEVICE void spmv_rows(const KfIx& ix, const KfCsr& A, const KfVec& x, VO& out) {
    if (A.wide)
        kf_spmv_rows<long long>(ix, A, x, out);
    else
        kf_spmv_rows<int>(ix, A, x, out);
}

template <class I, class VP>
KF_DEVICE void kf_spmv_long(const KfIx& ix, const KfCsr& A, const KfVec& x, VP& part) {
    const int t = ix.tx;
    for (int r = 0; r < KF_SUB; ++r) {
        const long long row = ix.i * KF_SUB + r;
        if (row >= A.rows) break;
        const long long b = A.start<I>(row), e = A.start<I>(row + 1);
        if (e - b <= A.long_row) continue;
        real s = real(0);
#pragma unroll 4
        for (long long k = b + t; k < e; k += 128) s += A.value(k) * kf_gather(x, A.col<I>(k));
        s = kf_warp_sum(s);
        if (t % 32 == 0) part.at(r, t / 32) = s;
    }
}

template <class VP>
KF_DEVICE void spmv_long(const KfIx& ix, const KfCsr& A, const KfVec& x, VP& part) {
    if (A.long_row <= 0) return;
    if (A.wide)
        kf_spmv_long<long long>(ix, A, x, part);
    else
        kf_spmv_long<int>(ix, A, x, part);
}

template <class I, class VP, class VO>
KF_DEVICE void kf_spmv_long_sum(const KfIx& ix, const KfCsr& A, VP& part, VO& out) {
    const int r = ix.tx;
    const long long row = ix.i * KF_SUB + r;
    if (r >= KF_SUB || row >= A.rows) return;
    if (A.start<I>(row + 1) - A.start<I>(row) > A.long_row)
        out.at(r) = part.at(r, 0) + part.at(r, 1) + part.at(r, 2) + part.at(r, 3);
}

template <class VP, class VO>
KF_DEVICE void spmv_long_sum(const KfIx& ix, const KfCsr& A, VP& part, VO& out) {
    if (A.long_row <= 0) return;
    if (A.wide)
        kf_spmv_long_sum<long long>(ix, A, part, out);
    else
        kf_spmv_long_sum<int>(ix, A, part, out);
}
