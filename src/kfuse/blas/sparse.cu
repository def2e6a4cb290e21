// Sparse matrix-vector product over a CSR matrix (sparse.toml): out = A x.
// An instance is the 32 rows ix.i * KF_SUB .. + 31, run by 128 threads (t = tx; warp t / 32).
//   spmv_rows      A.lanes == 0 (streamed rows): warp w takes rows 8 w .. 8 w + 7, whose entries are
//                  one contiguous range, in chunks of 32 KF_SPMV_CHUNK entries: lane l loads entries
//                  l, l + 32, ... of the chunk (all in flight at once, coalesced), writes their
//                  products to the warp's slab in shared memory, and the 4 lanes of each row then
//                  add its part of the chunk from there (kf_spmv_stream).  No row's bounds wait for
//                  another's, and a row of any length keeps every lane loading.
//                  A.lanes > 0: groups of A.lanes threads (a power of two) take the rows in turn: group g of
//                  G = 128 / lanes takes rows g, g + G, ...; its lanes read entries lane, lane +
//                  lanes, ... of the row (consecutive lanes, consecutive entries: coalesced) and
//                  sum them by shuffles.  Each warp's groups make the same number of passes, so
//                  every lane of a warp takes part in every shuffle.  Rows longer than A.long_row
//                  are left to the two routines below.
//   spmv_long      all 128 threads read each long row of the instance (found by one ballot a warp;
//                  entries t, t + 128, ..., KF_SPMV_BATCH of them in flight a thread): one partial
//                  per warp, in part(r, warp)
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

// entries each lane of a streaming warp has in flight per chunk (the slab holds 32 of them a lane)
#define KF_SPMV_CHUNK 4

template <class I, class VS, class VO>
KF_DEVICE void kf_spmv_stream(const KfIx& ix, const KfCsr& A, const KfVec& x, VS& slab, VO& out) {
    const unsigned all = 0xffffffffu;
    const int w = ix.tx / 32, lane = ix.tx % 32;
    const int j = lane / 4, q = lane % 4;                 // the row lane adds up (of 8), and its part
    const long long row0 = ix.i * KF_SUB + 8 * w;
    // lane j <= 8 reads the start of row row0 + j (rows past the end start at nnz: empty); offsets
    // from the warp's first entry are ints (8 rows of fewer than 2^31 entries)
    long long bound = 0;
    if (lane <= 8) bound = A.start<I>(row0 + lane < A.rows ? row0 + lane : A.rows);
    const long long lo = __shfl_sync(all, bound, 0);
    const int rel = (int)(bound - lo);
    const int b = __shfl_sync(all, rel, j), e = __shfl_sync(all, rel, j + 1), hi = __shfl_sync(all, rel, 8);
    const bool is_long = A.long_row > 0 && e - b > A.long_row;
    const unsigned longs = __ballot_sync(all, is_long && q == 0);     // bit 4 j: row j is left to spmv_long
    const I* idx = static_cast<const I*>(A.idx) + lo;
    const real* val = A.val + lo;
    real s = real(0);
    for (int c0 = 0;;) {                                  // warp-uniform: c0, c1 are the same in every lane
        for (unsigned m = longs; m; m &= m - 1) {         // a chunk starting in a long row starts past it
            const int r = (__ffs(m) - 1) / 4;
            const int lb = __shfl_sync(all, rel, r), le = __shfl_sync(all, rel, r + 1);
            if (c0 >= lb && c0 < le) c0 = le;
        }
        if (c0 >= hi) break;
        int c1 = c0 + 32 * KF_SPMV_CHUNK < hi ? c0 + 32 * KF_SPMV_CHUNK : hi;
        for (unsigned m = longs; m; m &= m - 1) {         // ... and ends where the next long row starts
            const int lb = __shfl_sync(all, rel, (__ffs(m) - 1) / 4);
            if (lb > c0 && lb < c1) c1 = lb;
        }
        I c[KF_SPMV_CHUNK];
        real v[KF_SPMV_CHUNK];
#pragma unroll
        for (int u = 0; u < KF_SPMV_CHUNK; ++u) {
            const int k = c0 + lane + 32 * u;
            c[u] = k < c1 ? idx[k] : I(-1);
            v[u] = k < c1 ? val[k] : real(0);
        }
#pragma unroll
        for (int u = 0; u < KF_SPMV_CHUNK; ++u) slab.at(w, lane + 32 * u) = v[u] * kf_gather(x, (long long)c[u]);
        __syncwarp();
        if (!is_long) {
            const int ke = e < c1 ? e : c1;
            for (int k = (b > c0 ? b : c0) + q; k < ke; k += 4) s += slab.at(w, k - c0);
        }
        __syncwarp();                                     // the slab is the next chunk's
        c0 = c1;
    }
    s += __shfl_xor_sync(all, s, 1);
    s += __shfl_xor_sync(all, s, 2);
    if (q == 0 && !is_long) out.at(8 * w + j) = s;
}

template <class VS, class VO>
KF_DEVICE void spmv_rows(const KfIx& ix, const KfCsr& A, const KfVec& x, VS& slab, VO& out) {
    if (A.lanes == 0) {
        if (A.wide)
            kf_spmv_stream<long long>(ix, A, x, slab, out);
        else
            kf_spmv_stream<int>(ix, A, x, slab, out);
    } else if (A.wide) {
        kf_spmv_rows<long long>(ix, A, x, out);
    } else {
        kf_spmv_rows<int>(ix, A, x, out);
    }
}

// entries of a long row each thread has in flight at once: their columns and values are loaded
// together, then their gathers (two round trips to memory a batch, not two an entry)
#define KF_SPMV_BATCH 16

template <class I, class VP>
KF_DEVICE void kf_spmv_long(const KfIx& ix, const KfCsr& A, const KfVec& x, VP& part) {
    const int t = ix.tx, lane = t % 32;
    // the instance's long rows found at once: lane r of every warp reads row r's bounds, a ballot
    // marks the long ones (a row at a time, 32 dependent loads an instance, cost more than the sums)
    const long long first = ix.i * KF_SUB;
    long long lb = 0, le = 0;
    if (first + lane < A.rows) {
        lb = A.start<I>(first + lane);
        le = A.start<I>(first + lane + 1);
    }
    unsigned mask = __ballot_sync(0xffffffffu, le - lb > A.long_row);
    while (mask) {
        const int r = __ffs(mask) - 1;
        mask &= mask - 1;
        const long long b = __shfl_sync(0xffffffffu, lb, r), e = __shfl_sync(0xffffffffu, le, r);
        real s = real(0);
        long long k = b + t;
        for (; k + (KF_SPMV_BATCH - 1) * 128 < e; k += KF_SPMV_BATCH * 128) {
            I c[KF_SPMV_BATCH];
            real v[KF_SPMV_BATCH];
#pragma unroll
            for (int u = 0; u < KF_SPMV_BATCH; ++u) {
                c[u] = static_cast<const I*>(A.idx)[k + u * 128];
                v[u] = A.value(k + u * 128);
            }
#pragma unroll
            for (int u = 0; u < KF_SPMV_BATCH; ++u) s += v[u] * kf_gather(x, (long long)c[u]);
        }
        for (; k < e; k += 128) s += A.value(k) * kf_gather(x, A.col<I>(k));
        s = kf_warp_sum(s);
        if (lane == 0) part.at(r, t / 32) = s;
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
