// BLAS-1 elementary functions: map and reduce over 32-entry subvectors.
// Loads fill entries past the end with 0, stores past the end are dropped.  Two variants:
//   "warp"  one instance = one subvector = 32 threads (a warp); thread tx owns entries
//           tx + 32k (mapping "lane"): 4-byte accesses (float)
//   "quad"  one instance = one subvector = 8 threads; thread tx owns the 4 consecutive entries
//           4 tx + k (mapping "quad"): one 16-byte access per thread (float; two for double)
// The compute routines serve both: they loop over the slots their view exposes (V::slots).

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

// entries 4 tx .. 4 tx + 3 of the subvector (mapping "quad"): vector access when the four are
// inside the array and 16-byte aligned, entry by entry otherwise (see KfVec::get4)
template <class V>
KF_DEVICE void quad_load(const KfIx& ix, const KfVec& g, V& e) {
    static_assert(V::slots == 4, "quad_load: mapping \"quad\" has 4 slots per thread");
    real v[4];
    g.get4(ix.i * KF_SUB + 4 * ix.tx, v, real(0));
#pragma unroll
    for (int k = 0; k < 4; ++k) e(k) = v[k];
}

template <class V>
KF_DEVICE void quad_store(const KfIx& ix, V& e, const KfVec& g) {
    static_assert(V::slots == 4, "quad_store: mapping \"quad\" has 4 slots per thread");
    real v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = e(k);
    g.put4(ix.i * KF_SUB + 4 * ix.tx, v);
}

// out = alpha x
template <class VX, class VO>
KF_DEVICE void scal_compute(const KfIx& ix, VX& x, VO& out, real alpha) {
#pragma unroll
    for (int k = 0; k < VO::slots; ++k) out(k) = alpha * x(k);
}

// out = alpha x + y
template <class VX, class VY, class VO>
KF_DEVICE void axpy_compute(const KfIx& ix, VX& x, VY& y, VO& out, real alpha) {
#pragma unroll
    for (int k = 0; k < VO::slots; ++k) out(k) = alpha * x(k) + y(k);
}

// out = alpha x + beta y
template <class VX, class VY, class VO>
KF_DEVICE void axpby_compute(const KfIx& ix, VX& x, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int k = 0; k < VO::slots; ++k) out(k) = alpha * x(k) + beta * y(k);
}

// out = x + y
template <class VX, class VY, class VO>
KF_DEVICE void vadd_compute(const KfIx& ix, VX& x, VY& y, VO& out) {
#pragma unroll
    for (int k = 0; k < VO::slots; ++k) out(k) = x(k) + y(k);
}

// r += x . y over this thread's entries (a per-thread partial, mapping "thread")
template <class VX, class VY, class VR>
KF_DEVICE void dot_compute(const KfIx& ix, VX& x, VY& y, VR& r) {
#pragma unroll
    for (int k = 0; k < VX::slots; ++k) r(0) += x(k) * y(k);
}

// the warp sums its partials; lane 0 adds the instance's share to the global result
template <class VR>
KF_DEVICE void dot_store(const KfIx& ix, VR& r, const KfVec& g) {
    real s = kf_warp_sum(r(0));
    if (ix.tx == 0) g.add(0, s);
}

// "quad" variant (8 threads per instance, 4 instances per warp): each instance sums the
// partials over the warp's 4 instances and one lane adds them.  Runs after the serial loop, in
// every lane (full-mask shuffles).
template <class VR>
KF_DEVICE void quad_dot_store(const KfIx& ix, VR& r, const KfVec& g) {
    // Every instance adds to the same scalar, and a warp always holds 4 whole instances (blocks
    // are whole warps): sum the warp's 32 lanes and add once, 4x fewer same-address atomics.
    real s = kf_warp_sum(r(0));
    if ((threadIdx.x & 31) == 0) g.add(0, s);
}
