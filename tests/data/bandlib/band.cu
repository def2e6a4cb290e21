// Experiment: the strip routines (src/kfuse/blas/blas2_strip.cu) and an adding store for bands.
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

// the band's R row results (mapping "bcast"), added: the other bands of the same rows add too
template <int BY, int R, int NC, class V>
KF_DEVICE void srowvec_add_store(const KfIx& ix, V& v, const KfVec& g) {
    const int t = ix.tx + 32 * ix.ty;
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (t == r) g.add(ix.i * R + r, v(r));
}
