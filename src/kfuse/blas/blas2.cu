// BLAS-2 elementary functions: 2-level nestings of map and reduce over 32x32 tiles.
// Instance (i, j) = tile (i, j) of the matrix; its threads are 32 x BY (BY a tunable macro).
// Thread (tx, ty) owns tile entries (ty + BY k, tx)     (mapping "rows"),
//                  subvector entries ty + BY k           (mapping "split", vectors along i),
//                  subvector entry tx                    (mapping "lane",  vectors along j).
// Every routine takes the variant's macros (BY) as its leading template parameters.

// ---- loads and stores --------------------------------------------------------------------
template <int BY, class V>
KF_DEVICE void tile_load(const KfIx& ix, const KfMat& g, V& a) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k)
        a(k) = g.get(ix.i * KF_TR + ix.ty + BY * k, ix.j * KF_TC + ix.tx, real(0));
}

template <int BY, class V>
KF_DEVICE void tile_store(const KfIx& ix, V& a, const KfMat& g) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) g.put(ix.i * KF_TR + ix.ty + BY * k, ix.j * KF_TC + ix.tx, a(k));
}

// subvector i of a vector along the rows (length = matrix rows)
template <int BY, class V>
KF_DEVICE void rowvec_load(const KfIx& ix, const KfVec& g, V& v) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) v(k) = g.get(ix.i * KF_TR + ix.ty + BY * k, real(0));
}

// subvector j of a vector along the columns (length = matrix columns)
template <int BY, class V>
KF_DEVICE void colvec_load(const KfIx& ix, const KfVec& g, V& v) {
    v(0) = g.get(ix.j * KF_TC + ix.tx, real(0));
}

// the beta-term of a row reduction (mapping "rowpart"): read by lane 0 of the first instance
// along the reduced axis j only, so that summing the partials over lanes and instances adds it once
template <int BY, class V>
KF_DEVICE void rowvec_load_first_j(const KfIx& ix, const KfVec& g, V& v) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k)
        v(k) = (ix.j == 0 && ix.tx == 0) ? g.get(ix.i * KF_TR + ix.ty + BY * k, real(0)) : real(0);
}

// the beta-term of a column reduction (mapping "colpart"): read by warp 0 of the first instance
// along the reduced axis i only
template <int BY, class V>
KF_DEVICE void colvec_load_first_i(const KfIx& ix, const KfVec& g, V& v) {
    v(0) = (ix.i == 0 && ix.ty == 0) ? g.get(ix.j * KF_TC + ix.tx, real(0)) : real(0);
}

// row partials (mapping "rowpart"): out[i KF_TR + ty + BY k] += the sum over the warp's 32 lanes
// (lane = tx) of slot k, k < S = KF_TR / BY.  A transpose-reduce instead of S warp sums:
//  1. halving steps with offsets o = 16, 8, ..., 32 / S.  With 2h values left, a lane whose bit
//     o is set keeps the upper half w[h .. 2h-1] and sends the lower half to lane ^ o; a lane
//     whose bit o is clear keeps the lower half and sends the upper half.  Each kept value adds
//     the partner's copy of the same slot (h shuffles; S - 1 over all steps).  Afterwards lane L
//     holds one slot, k = L / G with G = 32 / S (bits 4, 3, ... of L spell k, highest first),
//     summed over the S lanes that differ from L in those bits;
//  2. xor steps G / 2, ..., 1 add up the G lanes G k .. G k + G-1 that hold slot k;
//  3. ONE atomic instruction per warp: lanes L = G k (S of them) add row ty + BY k
//     (KF_TR = 32: G = BY, so lane L = BY k adds row ty + L).
// S - 1 + log2(G) shuffles instead of 5 S.  tests/test_blas_variants.py mirrors this in NumPy.
template <int BY, class V>
KF_DEVICE void rowsum_store(const KfIx& ix, V& v, const KfVec& g) {
    constexpr int S = KF_TR / BY;                 // slots (rows) per lane
    static_assert(S >= 1 && S <= 32 && (S & (S - 1)) == 0, "rowsum_store: KF_TR / BY is a power of two <= 32");
    constexpr int G = 32 / S;                     // lanes that end up sharing one slot
    const int lane = ix.tx;
    real w[S];
#pragma unroll
    for (int k = 0; k < S; ++k) w[k] = v(k);
    // constant trip counts (the k < h test folds away) so that w stays in registers
#pragma unroll
    for (int step = 0; (S >> step) > 1; ++step) {
        const int h = S >> (step + 1), o = 16 >> step;    // h = S/2, S/4, ..., 1; o = 16, 8, ...
        const bool up = (lane & o) != 0;          // keep the upper half w[h .. 2h-1]
#pragma unroll
        for (int k = 0; k < S / 2; ++k) {
            if (k < h) {
                const real keep = up ? w[k + h] : w[k];
                const real send = up ? w[k] : w[k + h];
                w[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
        }
    }
    const real s = kf_lanes_sum<G>(w[0]);         // xor G/2 .. 1: the G lanes of slot lane / G
    if (lane % G == 0) g.add(ix.i * KF_TR + ix.ty + BY * (lane / G), s);
}

// column partials (mapping "colpart"), one per warp: every warp adds its partial
template <int BY, class V>
KF_DEVICE void colsum_store(const KfIx& ix, V& v, const KfVec& g) {
    g.add(ix.j * KF_TC + ix.tx, v(0));
}

// ---- gemv: out_i += sum_j alpha A_ij x_j (+ beta y_i) ------------------------------------
// each lane accumulates its column's products; the store sums the lanes (once per stored row
// block, so only once per block when the loop walks j)
template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemv_compute(const KfIx& ix, VA& a, VX& x, VO& out) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) out(k) += a(k) * x(0);
}

template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemv_compute_a(const KfIx& ix, VA& a, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) out(k) += alpha * (a(k) * x(0));
}

template <int BY, class VA, class VX, class VY, class VO>
KF_DEVICE void gemv_compute_ab(const KfIx& ix, VA& a, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) out(k) += alpha * (a(k) * x(0)) + beta * y(k);
}

// shared-memory variant (the paper's): thread (tx, ty) sums row tx over columns ty + BY k of
// the transposed-read tile, then one warp adds the BY partials of each row.
template <int BY, class VA, class VX, class VP>
KF_DEVICE void gemv_smem_partial(const KfIx& ix, VA& a, VX& x, VP& part) {
    real s = 0;
#pragma unroll
    for (int k = 0; k < KF_TC / BY; ++k) s += a.at(ix.tx, ix.ty + BY * k) * x.at(ix.ty + BY * k);
    part(0) = s;
}

template <int BY, class VP, class VO>
KF_DEVICE void gemv_smem_finish(const KfIx& ix, VP& part, VO& out) {
    real s = 0;
#pragma unroll
    for (int r = 0; r < BY; ++r) s += part.at(r, ix.tx);
    out(0) += s;
}

template <int BY, class V>
KF_DEVICE void lane_rowvec_store(const KfIx& ix, V& v, const KfVec& g) {
    g.add(ix.i * KF_TR + ix.tx, v(0));
}

// ---- gemtv: out_j += sum_i alpha A_ij x_i (+ beta y_j) -----------------------------------
// each thread accumulates its column over its rows (mapping "colpart": one partial per warp)
template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemtv_compute(const KfIx& ix, VA& a, VX& x, VO& out) {
    real s = 0;
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) s += a(k) * x(k);
    out(0) += s;
}

template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemtv_compute_a(const KfIx& ix, VA& a, VX& x, VO& out, real alpha) {
    real s = 0;
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) s += a(k) * x(k);
    out(0) += alpha * s;
}

template <int BY, class VA, class VX, class VY, class VO>
KF_DEVICE void gemtv_compute_ab(const KfIx& ix, VA& a, VX& x, VY& y, VO& out, real alpha, real beta) {
    real s = 0;
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) s += a(k) * x(k);
    out(0) += alpha * s + beta * y(0);
}

// shared-memory variant: the warps' column partials meet in shared memory and one warp adds
// them, so a tile costs 32 atomics instead of 32 x BY when the output is stored per tile
template <int BY, class VA, class VX, class VP>
KF_DEVICE void gemtv_smem_partial(const KfIx& ix, VA& a, VX& x, VP& part) {
    real s = 0;
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) s += a(k) * x(k);
    part(0) = s;
}

// ---- ger: out = A + u v^T;  madd: out = A + B ---------------------------------------------
template <int BY, class VA, class VU, class VV, class VO>
KF_DEVICE void ger_compute(const KfIx& ix, VA& a, VU& u, VV& v, VO& out) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) out(k) = a(k) + u(k) * v(0);
}

template <int BY, class VA, class VB, class VO>
KF_DEVICE void madd_compute(const KfIx& ix, VA& a, VB& b, VO& out) {
#pragma unroll
    for (int k = 0; k < KF_TR / BY; ++k) out(k) = a(k) + b(k);
}

// ---- 16-byte variants ("q"): 8 threads per tile row, 4 consecutive columns each ------------
// Thread (tx, ty) of 8 x BY owns tile entries (ty + BY r, 4 tx + e)  (mapping "qrows", slot
// 4 r + e), column-vector entries 4 tx + e (mapping "quad"), row-vector entries ty + BY r
// (mapping "split"; "rowpart" for row partials summed over tx), column partials 4 tx + e
// summed over ty (mapping "qcolpart").  A warp moves 4 rows of 128 bytes per instruction.
template <int BY, class V>
KF_DEVICE void qtile_load(const KfIx& ix, const KfMat& g, V& a) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r) {
        real t[4];
        g.get4(ix.i * KF_TR + ix.ty + BY * r, ix.j * KF_TC + 4 * ix.tx, t, real(0));
#pragma unroll
        for (int e = 0; e < 4; ++e) a(4 * r + e) = t[e];
    }
}

template <int BY, class V>
KF_DEVICE void qtile_store(const KfIx& ix, V& a, const KfMat& g) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r) {
        real t[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) t[e] = a(4 * r + e);
        g.put4(ix.i * KF_TR + ix.ty + BY * r, ix.j * KF_TC + 4 * ix.tx, t);
    }
}

// subvector j of a vector along the columns, 4 entries per thread (mapping "quad")
template <int BY, class V>
KF_DEVICE void qcolvec_load(const KfIx& ix, const KfVec& g, V& v) {
    real t[4];
    g.get4(ix.j * KF_TC + 4 * ix.tx, t, real(0));
#pragma unroll
    for (int e = 0; e < 4; ++e) v(e) = t[e];
}

// the beta-term of a column reduction (mapping "qcolpart"): read by the threads of ty = 0 of
// the first instance along the reduced axis i only
template <int BY, class V>
KF_DEVICE void qcolvec_load_first_i(const KfIx& ix, const KfVec& g, V& v) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
        v(e) = (ix.i == 0 && ix.ty == 0) ? g.get(ix.j * KF_TC + 4 * ix.tx + e, real(0)) : real(0);
}

// row partials (mapping "rowpart") of 8 x BY threads: out[i KF_TR + ty + BY k] += the sum over
// the 8 threads tx of slot k.  The transpose-reduce of rowsum_store within each group of 8
// lanes (lane = tx + 8 (ty % 4)): halving steps with offsets 4, 2, ... leave lane tx with slot
// k = tx / G (G = 8 / S), summed over S lanes; xor steps G/2 .. 1 add the G lanes that share
// it; lanes tx = G k add row ty + BY k.  S = KF_TR / BY <= 8.
template <int BY, class V>
KF_DEVICE void qrowsum_store(const KfIx& ix, V& v, const KfVec& g) {
    constexpr int S = KF_TR / BY;
    static_assert(S >= 1 && S <= 8 && (S & (S - 1)) == 0, "qrowsum_store: KF_TR / BY is a power of two <= 8");
    constexpr int G = 8 / S;
    const int l = ix.tx;
    real w[S];
#pragma unroll
    for (int k = 0; k < S; ++k) w[k] = v(k);
#pragma unroll
    for (int step = 0; (S >> step) > 1; ++step) {
        const int h = S >> (step + 1), o = 4 >> step;
        const bool up = (l & o) != 0;
#pragma unroll
        for (int k = 0; k < S / 2; ++k) {
            if (k < h) {
                const real keep = up ? w[k + h] : w[k];
                const real send = up ? w[k] : w[k + h];
                w[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
        }
    }
    const real s = kf_lanes_sum<G>(w[0]);
    if (l % G == 0) g.add(ix.i * KF_TR + ix.ty + BY * (l / G), s);
}

// column partials (mapping "qcolpart"): the warp's 4 rows of threads (lanes tx, tx+8, tx+16,
// tx+24) are summed by shuffles, then the threads of the first row add their 4 entries
template <int BY, class V>
KF_DEVICE void qcolsum_store(const KfIx& ix, V& v, const KfVec& g) {
    real t[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        t[e] = v(e);
        t[e] += __shfl_xor_sync(0xffffffffu, t[e], 8);
        t[e] += __shfl_xor_sync(0xffffffffu, t[e], 16);
    }
    if ((ix.ty & 3) == 0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) g.add(ix.j * KF_TC + 4 * ix.tx + e, t[e]);
    }
}

template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemv_qcompute(const KfIx& ix, VA& a, VX& x, VO& out) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r)
        out(r) += a(4 * r) * x(0) + a(4 * r + 1) * x(1) + a(4 * r + 2) * x(2) + a(4 * r + 3) * x(3);
}

template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemv_qcompute_a(const KfIx& ix, VA& a, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r)
        out(r) += alpha * (a(4 * r) * x(0) + a(4 * r + 1) * x(1) + a(4 * r + 2) * x(2) + a(4 * r + 3) * x(3));
}

template <int BY, class VA, class VX, class VY, class VO>
KF_DEVICE void gemv_qcompute_ab(const KfIx& ix, VA& a, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r)
        out(r) += alpha * (a(4 * r) * x(0) + a(4 * r + 1) * x(1) + a(4 * r + 2) * x(2) + a(4 * r + 3) * x(3))
                  + beta * y(r);
}

template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemtv_qcompute(const KfIx& ix, VA& a, VX& x, VO& out) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        real s = 0;
#pragma unroll
        for (int r = 0; r < KF_TR / BY; ++r) s += a(4 * r + e) * x(r);
        out(e) += s;
    }
}

template <int BY, class VA, class VX, class VO>
KF_DEVICE void gemtv_qcompute_a(const KfIx& ix, VA& a, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        real s = 0;
#pragma unroll
        for (int r = 0; r < KF_TR / BY; ++r) s += a(4 * r + e) * x(r);
        out(e) += alpha * s;
    }
}

template <int BY, class VA, class VX, class VY, class VO>
KF_DEVICE void gemtv_qcompute_ab(const KfIx& ix, VA& a, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        real s = 0;
#pragma unroll
        for (int r = 0; r < KF_TR / BY; ++r) s += a(4 * r + e) * x(r);
        out(e) += alpha * s + beta * y(e);
    }
}

template <int BY, class VA, class VU, class VV, class VO>
KF_DEVICE void ger_qcompute(const KfIx& ix, VA& a, VU& u, VV& v, VO& out) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) out(4 * r + e) = a(4 * r + e) + u(r) * v(e);
}

template <int BY, class VA, class VB, class VO>
KF_DEVICE void madd_qcompute(const KfIx& ix, VA& a, VB& b, VO& out) {
#pragma unroll
    for (int k = 0; k < 4 * (KF_TR / BY); ++k) out(k) = a(k) + b(k);
}

// ---- wide tiles ("wide"): an instance is KF_TR rows x TC columns (TC = 128 M), threads 32 x BY
// Thread (tx, ty) owns tile entries (ty + BY r, 128 m + 4 tx + e), m < M (mapping "qrows", slot
// 4 (M r + m) + e), column-vector entries 128 m + 4 tx + e (mapping "quad", slot 4 m + e),
// row-vector entries ty + BY r (mapping "split"; "rowpart" for row partials summed over the
// warp's 32 lanes), column partials summed over ty, i.e. over the block's warps ("qcolpart").
// A warp moves 512 contiguous bytes of one row per instruction (float32), 512 M bytes of it per
// instance: long runs of a row per warp keep the DRAM pages open (benchmarks/wide_explore.py).
template <int BY, int TC, class V>
KF_DEVICE void wtile_load(const KfIx& ix, const KfMat& g, V& a) {
    constexpr int M = TC / 128;
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) {
            real t[4];
            g.get4(ix.i * KF_TR + ix.ty + BY * r, ix.j * TC + 128 * m + 4 * ix.tx, t, real(0));
#pragma unroll
            for (int e = 0; e < 4; ++e) a(4 * (M * r + m) + e) = t[e];
        }
}

// piece j of a vector along the columns (TC entries; mapping "quad")
template <int BY, int TC, class V>
KF_DEVICE void wcolvec_load(const KfIx& ix, const KfVec& g, V& v) {
#pragma unroll
    for (int m = 0; m < TC / 128; ++m) {
        real t[4];
        g.get4(ix.j * TC + 128 * m + 4 * ix.tx, t, real(0));
#pragma unroll
        for (int e = 0; e < 4; ++e) v(4 * m + e) = t[e];
    }
}

// the beta-term of a column reduction (mapping "qcolpart"): read by warp ty = 0 of the first
// instance along the reduced axis i only
template <int BY, int TC, class V>
KF_DEVICE void wcolvec_load_first_i(const KfIx& ix, const KfVec& g, V& v) {
#pragma unroll
    for (int m = 0; m < TC / 128; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            v(4 * m + e) = (ix.i == 0 && ix.ty == 0) ? g.get(ix.j * TC + 128 * m + 4 * ix.tx + e, real(0)) : real(0);
}

// piece i of a vector along the rows (mapping "split"), and its beta-term for a row reduction
// (mapping "rowpart", lane 0 of the first instance along j): as for 32 x BY threads
template <int BY, int TC, class V>
KF_DEVICE void wrowvec_load(const KfIx& ix, const KfVec& g, V& v) { rowvec_load<BY>(ix, g, v); }

template <int BY, int TC, class V>
KF_DEVICE void wrowvec_load_first_j(const KfIx& ix, const KfVec& g, V& v) { rowvec_load_first_j<BY>(ix, g, v); }

// row partials (mapping "rowpart"): summed over the warp's 32 lanes by rowsum_store's
// transpose-reduce, one atomic instruction per warp
template <int BY, int TC, class V>
KF_DEVICE void wrowsum_store(const KfIx& ix, V& v, const KfVec& g) { rowsum_store<BY>(ix, v, g); }

// column partials (mapping "qcolpart") summed over the block's BY warps: each warp writes its
// partials to the shared tile part (BY x TC; the finish routine), then, after the barrier the
// compiler places between them, each column is summed over the rows of part and added once
template <int BY, int TC, class V, class VP>
KF_DEVICE void wcolsum_gather(const KfIx& ix, V& v, VP& part) {
#pragma unroll
    for (int m = 0; m < TC / 128; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) part.at(ix.ty, 128 * m + 4 * ix.tx + e) = v(4 * m + e);
}

template <int BY, int TC, class VP>
KF_DEVICE void wcolsum_store(const KfIx& ix, VP& part, const KfVec& g) {
    for (int c = ix.tx + 32 * ix.ty; c < TC; c += 32 * BY) {
        real s = 0;
#pragma unroll
        for (int w = 0; w < BY; ++w) s += part.at(w, c);
        g.add(ix.j * TC + c, s);
    }
}

// ---- wide computes (slots as above)
template <int BY, int TC, class VA, class VX>
KF_DEVICE real wrow_dot(VA& a, VX& x, int r) {
    constexpr int M = TC / 128;
    real s = 0;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) s += a(4 * (M * r + m) + e) * x(4 * m + e);
    return s;
}

template <int BY, int TC, class VA, class VX, class VO>
KF_DEVICE void gemv_wcompute(const KfIx& ix, VA& a, VX& x, VO& out) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r) out(r) += wrow_dot<BY, TC>(a, x, r);
}

template <int BY, int TC, class VA, class VX, class VO>
KF_DEVICE void gemv_wcompute_a(const KfIx& ix, VA& a, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r) out(r) += alpha * wrow_dot<BY, TC>(a, x, r);
}

template <int BY, int TC, class VA, class VX, class VY, class VO>
KF_DEVICE void gemv_wcompute_ab(const KfIx& ix, VA& a, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r) out(r) += alpha * wrow_dot<BY, TC>(a, x, r) + beta * y(r);
}

template <int BY, int TC, class VA, class VX>
KF_DEVICE real wcol_dot(VA& a, VX& x, int k) {     // slot k = 4 m + e of the column partials
    constexpr int M = TC / 128;
    real s = 0;
#pragma unroll
    for (int r = 0; r < KF_TR / BY; ++r) s += a(4 * M * r + k) * x(r);
    return s;
}

template <int BY, int TC, class VA, class VX, class VO>
KF_DEVICE void gemtv_wcompute(const KfIx& ix, VA& a, VX& x, VO& out) {
#pragma unroll
    for (int k = 0; k < TC / 32; ++k) out(k) += wcol_dot<BY, TC>(a, x, k);
}

template <int BY, int TC, class VA, class VX, class VO>
KF_DEVICE void gemtv_wcompute_a(const KfIx& ix, VA& a, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int k = 0; k < TC / 32; ++k) out(k) += alpha * wcol_dot<BY, TC>(a, x, k);
}

template <int BY, int TC, class VA, class VX, class VY, class VO>
KF_DEVICE void gemtv_wcompute_ab(const KfIx& ix, VA& a, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int k = 0; k < TC / 32; ++k) out(k) += alpha * wcol_dot<BY, TC>(a, x, k) + beta * y(k);
}
