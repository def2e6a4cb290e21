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
//                  every lane of a warp takes part in every shuffle.
// Rows longer than A.long_row were summed before the kernel (kf_spmv_long_rows, sparse.cuh): both
// mappings skip their entries and take the row's value from A.lsum.
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
        if (lane == 0) out.at(r) = is_long ? A.lsum[row] : s;
    }
}

// entries each lane of a streaming warp has in flight per chunk: 16 bytes of values (4 floats, 2
// doubles; more doubles spill at the 32 registers of a full multiprocessor and ran slower).  The
// slab holds 4 a lane.
#define KF_SPMV_CHUNK (16 / (int)sizeof(real))

// Offsets from a warp's first entry have the index type O = I: the 8 rows of a matrix with int
// (32-bit) indices hold fewer than 2^31 entries, those of one with long long indices may hold more
// (8 rows of 2^28 entries: an int offset wrapped to -2^31 and every row summed to 0).  The loops
// compare differences with the chunk's width, never c0 + width, so no offset overflows near 2^31.
template <class I, class VS, class VO>
KF_DEVICE void kf_spmv_stream(const KfIx& ix, const KfCsr& A, const KfVec& x, VS& slab, VO& out) {
    using O = I;                                          // an offset into the warp's entries
    const unsigned all = 0xffffffffu;
    const int w = ix.tx / 32, lane = ix.tx % 32;
    const int j = lane / 4, q = lane % 4;                 // the row lane adds up (of 8), and its part
    const long long row0 = ix.i * KF_SUB + 8 * w;
    // lane j <= 8 reads the start of row row0 + j (rows past the end start at nnz: empty)
    long long bound = 0;
    if (lane <= 8) bound = A.start<I>(row0 + lane < A.rows ? row0 + lane : A.rows);
    const long long lo = __shfl_sync(all, bound, 0);
    const O rel = (O)(bound - lo);
    const O b = __shfl_sync(all, rel, j), e = __shfl_sync(all, rel, j + 1), hi = __shfl_sync(all, rel, 8);
    const bool is_long = A.long_row > 0 && e - b > A.long_row;
    const unsigned longs = __ballot_sync(all, is_long && q == 0);     // bit 4 j: row j is in A.lsum
    const I* idx = static_cast<const I*>(A.idx) + lo;
    const real* val = A.val + lo;
    real s = real(0);
    for (O c0 = 0;;) {                                    // warp-uniform: c0, c1 are the same in every lane
        for (unsigned m = longs; m; m &= m - 1) {         // a chunk starting in a long row starts past it
            const int r = (__ffs(m) - 1) / 4;
            const O lb = __shfl_sync(all, rel, r), le = __shfl_sync(all, rel, r + 1);
            if (c0 >= lb && c0 < le) c0 = le;
        }
        if (c0 >= hi) break;
        O c1 = hi - c0 > 32 * KF_SPMV_CHUNK ? c0 + 32 * KF_SPMV_CHUNK : hi;
        for (unsigned m = longs; m; m &= m - 1) {         // ... and ends where the next long row starts
            const O lb = __shfl_sync(all, rel, (__ffs(m) - 1) / 4);
            if (lb > c0 && lb < c1) c1 = lb;
        }
        const int width = (int)(c1 - c0);                // at most 32 KF_SPMV_CHUNK
        I c[KF_SPMV_CHUNK];
        real v[KF_SPMV_CHUNK];
#pragma unroll
        for (int u = 0; u < KF_SPMV_CHUNK; ++u) {
            const int k = lane + 32 * u;                  // entry c0 + k
            c[u] = k < width ? idx[c0 + k] : I(-1);
            v[u] = k < width ? val[c0 + k] : real(0);
        }
#pragma unroll
        for (int u = 0; u < KF_SPMV_CHUNK; ++u) slab.at(w, lane + 32 * u) = v[u] * kf_gather(x, (long long)c[u]);
        __syncwarp();
        if (!is_long && b < c1 && e > c0) {               // row j's entries in this chunk: slab [kb, ke)
            const int kb = b > c0 ? (int)(b - c0) : 0, ke = e < c1 ? (int)(e - c0) : width;
            for (int k = kb + q; k < ke; k += 4) s += slab.at(w, k);
        }
        __syncwarp();                                     // the slab is the next chunk's
        c0 = c1;
    }
    s += __shfl_xor_sync(all, s, 1);
    s += __shfl_xor_sync(all, s, 2);
    if (q == 0) out.at(8 * w + j) = is_long ? A.lsum[row0 + j] : s;
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
