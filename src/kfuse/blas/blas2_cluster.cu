// BLAS-2 cluster variants ("cluster"): a strip of R whole rows split over the C blocks of a
// thread-block cluster (sm_90), for rows longer than one block's registers hold.  Each block is
// one tile of R x NC of the strip -- the strip variant's routines, mappings and macros
// (blas2_strip.cu) -- and the C blocks of a cluster together span the row (the variant declares
// cluster = "C": C is compiled into the kernel, not a template parameter of the routines; the
// view of a shared local has it, VP::blocks).  A row sum completes in the cluster: each block's warps leave their partials in
// part (as in the strip variant), and after the cluster barrier the compiler places between
// them, every thread sums the C x BY partials of each row from the cluster's shared memories
// (distributed shared memory, kf_cluster_get).  Every block of the cluster then holds the same
// row results (the same sums in the same order), so each block can use them on its own columns.

// the C x BY partials of row r (C = VP::blocks): lane l of each warp reads partials l, l + 32, ...
// (block k / BY, warp k % BY) from the cluster's shared memories, then the warp sums its lanes:
// every thread of every block of the cluster gets the same total (the same sums in the same
// order).  One read per lane, not C x BY per thread: a cluster's shared memories answer a few
// reads per cycle (each thread reading every partial made clusters of 8 12x slower on the H100).
// All 32 lanes must call it.
template <int BY, class VP>
KF_DEVICE real cluster_row_sum(const KfIx& ix, VP& part, int r) {
    constexpr int N = VP::blocks * BY;
    real s = 0;
#pragma unroll
    for (int k0 = 0; k0 < N; k0 += 32) {
        const int k = k0 + ix.tx;
        if (k < N) s += kf_cluster_get(&part.at(r, k % BY), unsigned(k / BY));
    }
    return kf_lanes_sum<32>(s);
}

template <int BY, int R, int NC, class VP, class VO>
KF_DEVICE void gemv_cfinish(const KfIx& ix, VP& part, VO& out) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) += cluster_row_sum<BY>(ix, part, r);
}

template <int BY, int R, int NC, class VP, class VO>
KF_DEVICE void gemv_cfinish_a(const KfIx& ix, VP& part, VO& out, real alpha) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) += alpha * cluster_row_sum<BY>(ix, part, r);
}

template <int BY, int R, int NC, class VP, class VY, class VO>
KF_DEVICE void gemv_cfinish_ab(const KfIx& ix, VP& part, VY& y, VO& out, real alpha, real beta) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) += alpha * cluster_row_sum<BY>(ix, part, r) + beta * y(r);
}
