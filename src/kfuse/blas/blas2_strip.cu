// BLAS-2 strip variants ("strip"): an instance is R whole rows of the matrix, a tile of R x NC
// with NC at least the row length (the variant spans axis j whole: whole = ["j"]), so one block
// sees every entry of its rows and a reduction along a row completes inside the block.  Its
// result may then be used in the same kernel (issue 18: ATAX reads A once).
// Threads 32 x BY, T = 32 BY; thread t = tx + 32 ty owns the 4 consecutive columns
// 4 t + 4 T m + e, m < M = NC / 4T, of every row r of the strip (mapping "srows", slot
// 4 (M r + m) + e; 16-byte accesses, the whole block reading each row), and the same columns of
// vectors along j (mapping "svec", slot 4 m + e).  Vectors along i (R entries per strip) are held
// whole by every thread (mapping "bcast", slot r).  Columns past the row's end read as 0.
// Every routine takes the variant's macros (BY, R, NC) as its leading template parameters.

// ---- loads and stores --------------------------------------------------------------------
template <int BY, int R, int NC, class V>
KF_DEVICE void stile_load(const KfIx& ix, const KfMat& g, V& a) {
    constexpr int T = 32 * BY, M = NC / (4 * T);
    static_assert(M >= 1 && NC % (4 * T) == 0, "stile_load: NC is a multiple of 4 x 32 BY");
    const int t = ix.tx + 32 * ix.ty;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) {
            real v[4];
            g.get4(ix.i * R + r, ix.j * NC + 4 * t + 4 * T * m, v, real(0));
#pragma unroll
            for (int e = 0; e < 4; ++e) a(4 * (M * r + m) + e) = v[e];
        }
}

// a vector along the columns (mapping "svec")
template <int BY, int R, int NC, class V>
KF_DEVICE void svec_load(const KfIx& ix, const KfVec& g, V& v) {
    constexpr int T = 32 * BY, M = NC / (4 * T);
    const int t = ix.tx + 32 * ix.ty;
#pragma unroll
    for (int m = 0; m < M; ++m) {
        real w[4];
        g.get4(ix.j * NC + 4 * t + 4 * T * m, w, real(0));
#pragma unroll
        for (int e = 0; e < 4; ++e) v(4 * m + e) = w[e];
    }
}

// the strip's R entries of a vector along the rows, in every thread (mapping "bcast")
template <int BY, int R, int NC, class V>
KF_DEVICE void srowvec_load(const KfIx& ix, const KfVec& g, V& v) {
#pragma unroll
    for (int r = 0; r < R; ++r) v(r) = g.get(ix.i * R + r, real(0));
}

// the strip's R finished row results (mapping "bcast": every thread holds all of them): thread r
// writes entry r.  A plain store: the strip spans the row, no other instance adds to it.
template <int BY, int R, int NC, class V>
KF_DEVICE void srowvec_store(const KfIx& ix, V& v, const KfVec& g) {
    const int t = ix.tx + 32 * ix.ty;
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (t == r) g.put(ix.i * R + r, v(r));
}

// column results of the block's strips (mapping "svec"): each thread adds its columns once (the
// other blocks' strips add to the same columns: atomics, the output cleared before the launch),
// 4 consecutive columns at a time as one vector reduction (kf_add16) when all of the thread's
// quads are inside the array and aligned -- checked once for the first and the last: their
// stride, 4 T entries, keeps the alignment -- else entry by entry (one branch per thread, not
// per quad: a check per quad kept both paths' registers live and spilled the widest strips)
template <int BY, int R, int NC, class V>
KF_DEVICE void svec_add_store(const KfIx& ix, V& v, const KfVec& g) {
    constexpr int T = 32 * BY, M = NC / (4 * T);
    const long long e0 = ix.j * NC + 4 * (ix.tx + 32 * ix.ty);
    if (g.quad_ok(e0) && g.quad_ok(e0 + 4 * T * (M - 1))) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const real w[4] = {v(4 * m), v(4 * m + 1), v(4 * m + 2), v(4 * m + 3)};
            kf_add16(g.p + e0 + 4 * T * m, w);
        }
    } else {
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) g.add(e0 + 4 * T * m + e, v(4 * m + e));
    }
}

// ---- gemv: out_i = sum_j A_ij x_j, complete in the block -----------------------------------
// 1. each thread's partial dot of each row, summed over its warp by shuffles; lane 0 of warp ty
//    writes it to part(r, ty) (a local in shared memory: R x BY);
// 2. after the barrier the compiler places between them, every thread sums the BY warp partials
//    of each row: the row's result, in every thread (mapping "bcast")
template <int BY, int R, int NC, class VA, class VX, class VP>
KF_DEVICE void gemv_spartial(const KfIx& ix, VA& a, VX& x, VP& part) {
    constexpr int M = NC / (4 * 32 * BY);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        real s = 0;
#pragma unroll
        for (int k = 0; k < 4 * M; ++k) s += a(4 * M * r + k) * x(k);
        s = kf_lanes_sum<32>(s);
        if (ix.tx == 0) part.at(r, ix.ty) = s;
    }
}

template <int BY, int R, int NC, class VP, class VO>
KF_DEVICE void gemv_sfinish(const KfIx& ix, VP& part, VO& out) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        real s = 0;
#pragma unroll
        for (int w = 0; w < BY; ++w) s += part.at(r, w);
        out(r) += s;
    }
}

// the scaled forms: out = alpha A x, and out = alpha A x + beta y (y's R entries in every
// thread, mapping "bcast": the strip spans the row, so y is added once)
template <int BY, int R, int NC, class VP, class VO>
KF_DEVICE void gemv_sfinish_a(const KfIx& ix, VP& part, VO& out, real alpha) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        real s = 0;
#pragma unroll
        for (int w = 0; w < BY; ++w) s += part.at(r, w);
        out(r) += alpha * s;
    }
}

template <int BY, int R, int NC, class VP, class VY, class VO>
KF_DEVICE void gemv_sfinish_ab(const KfIx& ix, VP& part, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        real s = 0;
#pragma unroll
        for (int w = 0; w < BY; ++w) s += part.at(r, w);
        out(r) += alpha * s + beta * y(r);
    }
}

// ---- gemtv: out_j += sum_i A_ij x_i over the strip's rows (x in every thread) ---------------
template <int BY, int R, int NC, class VA, class VX, class VO>
KF_DEVICE void gemtv_scompute(const KfIx& ix, VA& a, VX& x, VO& out) {
    constexpr int M = NC / (4 * 32 * BY);
#pragma unroll
    for (int k = 0; k < 4 * M; ++k) {
        real s = 0;
#pragma unroll
        for (int r = 0; r < R; ++r) s += a(4 * M * r + k) * x(r);
        out(k) += s;
    }
}
