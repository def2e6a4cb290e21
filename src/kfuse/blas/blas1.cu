// BLAS-1 elementary functions: map and reduce over 32-entry subvectors.
// One instance = one subvector = 32 threads (a warp); thread tx owns entries tx + 32k
// (mapping "lane").  Loads fill entries past the end with 0, stores past the end are dropped.

template <class V>
KF_DEVICE void blas1_load(const KfIx& ix, const KfVec& g, V& e) {
#pragma unroll
    for (int k = 0; k < KF_SUB / 32; ++k) e(k) = g.get(ix.i * KF_SUB + ix.tx + 32 * k, real(0));
}

template <class V>
KF_DEVICE void blas1_store(const KfIx& ix, V& e, const KfVec& g) {
#pragma unroll
    for (int k = 0; k < KF_SUB / 32; ++k) g.put(ix.i * KF_SUB + ix.tx + 32 * k, e(k));
}

// out = alpha x
template <class VX, class VO>
KF_DEVICE void scal_compute(const KfIx& ix, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int k = 0; k < KF_SUB / 32; ++k) out(k) = alpha * x(k);
}

// out = alpha x + y
template <class VX, class VY, class VO>
KF_DEVICE void axpy_compute(const KfIx& ix, VX& x, VY& y, VO& out, real alpha) {
#pragma unroll
    for (int k = 0; k < KF_SUB / 32; ++k) out(k) = alpha * x(k) + y(k);
}

// out = alpha x + beta y
template <class VX, class VY, class VO>
KF_DEVICE void axpby_compute(const KfIx& ix, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int k = 0; k < KF_SUB / 32; ++k) out(k) = alpha * x(k) + beta * y(k);
}

// out = x + y
template <class VX, class VY, class VO>
KF_DEVICE void vadd_compute(const KfIx& ix, VX& x, VY& y, VO& out) {
#pragma unroll
    for (int k = 0; k < KF_SUB / 32; ++k) out(k) = x(k) + y(k);
}

// r += x . y over this thread's entries (a per-thread partial, mapping "thread")
template <class VX, class VY, class VR>
KF_DEVICE void dot_compute(const KfIx& ix, VX& x, VY& y, VR& r) {
#pragma unroll
    for (int k = 0; k < KF_SUB / 32; ++k) r(0) += x(k) * y(k);
}

// the warp sums its partials; lane 0 adds the instance's share to the global result
template <class VR>
KF_DEVICE void dot_store(const KfIx& ix, VR& r, const KfVec& g) {
    real s = kf_warp_sum(r(0));
    if (ix.tx == 0) g.add(0, s);
}
