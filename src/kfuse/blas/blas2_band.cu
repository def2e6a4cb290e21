// BLAS-2 band variants of gemv ("band"): an instance is a tile of R rows x NC columns with NC
// shorter than the row, read by the whole block as a strip is (blas2_strip.cu: thread t owns 4
// consecutive columns of every row, 16-byte accesses along each row), and a block walks its band
// along j.  Unlike a strip it never holds a whole row, so rows of any length take one block at full
// occupancy: taken where no strip of whole rows fits (faster than the 32-row `wide` tiles there:
// docs/design.md, "Strips, clusters and bands").  The row sums finish in the
// block every instance (gemv_sfinish*, blas2_strip.cu) and are added to the output once the band's
// loop ends: the other bands of the same rows add to it too.  Routines take (BY, R, NC) as the
// strip's do.

// the band's R row results (mapping "bcast"), added: thread r adds entry r
template <int BY, int R, int NC, class V>
KF_DEVICE void srowvec_add_store(const KfIx& ix, V& v, const KfVec& g) {
    const int t = ix.tx + 32 * ix.ty;
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (t == r) g.add(ix.i * R + r, v(r));
}

// the beta-term of the band's rows (mapping "bcast"): read by the first instance along j only, so
// that the bands of a row add it once
template <int BY, int R, int NC, class V>
KF_DEVICE void srowvec_load_first_j(const KfIx& ix, const KfVec& g, V& v) {
#pragma unroll
    for (int r = 0; r < R; ++r) v(r) = ix.j == 0 ? g.get(ix.i * R + r, real(0)) : real(0);
}
