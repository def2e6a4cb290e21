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

// the C x BY partials of row r, block by block, warp by warp: every thread of every block of the
// cluster adds the same partials in the same order, so all get the same total (each thread reads
// each partial: one broadcast load per warp; a sum over lanes by shuffles took more registers
// and spilled the widest float64 strips)
template <int BY, class VP>
KF_DEVICE real cluster_row_sum(const KfIx& ix, VP& part, int r) {
    real s = 0;
#pragma unroll
    for (int c = 0; c < VP::blocks; ++c)
#pragma unroll
        for (int w = 0; w < BY; ++w) s += kf_cluster_get(&part.at(r, w), unsigned(c));
    return s;
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
