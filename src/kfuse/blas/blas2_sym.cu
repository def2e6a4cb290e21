// Symmetric and triangular matrix-vector products that read only the upper triangle of a square
// matrix (BLAS uplo = 'U').  The variants declare triangle = "upper": their instances are the
// tiles (I, J) with I <= J only, S x S entries each (S a macro), so the tiles below the diagonal
// are never launched; on a diagonal tile (I == J) the entries below the diagonal are never read
// (they load as zeros without an access).  A kernel of such a variant holds its call alone and
// walks the upper tiles one after another (codegen/emit.py), loading and storing every tile.
//
// Threads 8 x BY.  Thread (tx, ty) owns tile entries (ty + BY r, 4 tx + 32 m + e), m < M = S / 32
// (mapping "qrows", slot 4 (M r + m) + e: a warp moves 4 rows of 128 bytes per instruction),
// entries 4 tx + 32 m + e of a vector along the columns (mapping "quad", slot 4 m + e) and entries
// ty + BY r of a vector along the rows (mapping "split"; "rowpart" for row partials summed over
// the 8 threads tx).  Every routine takes the variant's macros (BY, S) as its leading template
// parameters.

// ---- loads -------------------------------------------------------------------------------
// tile (I, J), the entries below the diagonal of a diagonal tile left unread (zeros)
template <int BY, int S, class V>
KF_DEVICE void utile_load(const KfIx& ix, const KfMat& g, V& a) {
    constexpr int M = S / 32;
    const bool diag = ix.i == ix.j;
#pragma unroll
    for (int r = 0; r < S / BY; ++r) {
        const long long row = ix.i * S + ix.ty + BY * r;
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const long long col = ix.j * S + 4 * ix.tx + 32 * m;
            real t[4];
            if (!diag || row <= col) {      // all four entries on or above the diagonal
                g.get4(row, col, t, real(0));
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) t[e] = row <= col + e ? g.get(row, col + e, real(0)) : real(0);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) a(4 * (M * r + m) + e) = t[e];
        }
    }
}

// piece J of x (mapping "quad"): the entries a tile's rows are multiplied by
template <int BY, int S, class VX>
KF_DEVICE void ux_load(const KfIx& ix, const KfVec& g, VX& x) {
#pragma unroll
    for (int m = 0; m < S / 32; ++m) {
        real t[4];
        g.get4(ix.j * S + 4 * ix.tx + 32 * m, t, real(0));
#pragma unroll
        for (int e = 0; e < 4; ++e) x(4 * m + e) = t[e];
    }
}

// pieces J (mapping "quad") and I (the local xi, mapping "split") of x: the mirrored tile A_IJ^T
// multiplies x's piece I
template <int BY, int S, class VX, class VI>
KF_DEVICE void usym_x_load(const KfIx& ix, const KfVec& g, VX& x, VI& xi) {
    ux_load<BY, S>(ix, g, x);
#pragma unroll
    for (int r = 0; r < S / BY; ++r) xi(r) = g.get(ix.i * S + ix.ty + BY * r, real(0));
}

// ---- computes ----------------------------------------------------------------------------
// row partials of A_IJ x_J: each thread's sum over its 4 M columns of each of its rows
template <int BY, int S, class VA, class VX, class VO>
KF_DEVICE void trmv_ucompute(const KfIx& ix, VA& a, VX& x, VO& out) {
    constexpr int M = S / 32;
#pragma unroll
    for (int r = 0; r < S / BY; ++r) {
        real s = 0;
#pragma unroll
        for (int k = 0; k < 4 * M; ++k) s += a(4 * M * r + k) * x(k);
        out(r) += s;
    }
}

// the row partials as trmv's, and the column partials of the mirror A_IJ^T x_I (local cp,
// mapping "qcolpart": each thread's sum over its rows).  A diagonal entry is counted once (in
// the rows), so a diagonal tile leaves it out of the columns.
template <int BY, int S, class VA, class VX, class VI, class VO, class VC>
KF_DEVICE void symv_ucompute(const KfIx& ix, VA& a, VX& x, VI& xi, VO& out, VC& cp) {
    constexpr int M = S / 32;
    const bool diag = ix.i == ix.j;
    real c[4 * M];
#pragma unroll
    for (int k = 0; k < 4 * M; ++k) c[k] = real(0);
#pragma unroll
    for (int r = 0; r < S / BY; ++r) {
        const int row = ix.ty + BY * r;     // in the tile
        real s = 0;
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int k = 4 * m + e;
                const real v = a(4 * M * r + k);
                s += v * x(k);
                c[k] += (diag && row == 4 * ix.tx + 32 * m + e) ? real(0) : v * xi(r);
            }
        }
        out(r) += s;
    }
#pragma unroll
    for (int k = 0; k < 4 * M; ++k) cp(k) = c[k];
}

// ---- stores ------------------------------------------------------------------------------
// row partials (mapping "rowpart"): out[I S + ty + BY k] += the sum over the 8 threads tx of
// slot k, by the transpose-reduce of qrowsum_store (blas2.cu) within each group of 8 lanes:
// halving steps with offsets 4, 2, ... leave lane tx with slot k = tx / G (G = 8 / R, R = S / BY
// slots), summed over R lanes; xor steps G/2 .. 1 add the G lanes that share it; lanes tx = G k
// add row ty + BY k.
template <int BY, int S, class V>
KF_DEVICE void urowsum_store(const KfIx& ix, V& v, const KfVec& g) {
    constexpr int R = S / BY;
    static_assert(R >= 1 && R <= 8 && (R & (R - 1)) == 0, "urowsum_store: S / BY is a power of two <= 8");
    constexpr int G = 8 / R;
    const int l = ix.tx;
    real w[R];
#pragma unroll
    for (int k = 0; k < R; ++k) w[k] = v(k);
#pragma unroll
    for (int step = 0; (R >> step) > 1; ++step) {
        const int h = R >> (step + 1), o = 4 >> step;
        const bool up = (l & o) != 0;
#pragma unroll
        for (int k = 0; k < R / 2; ++k) {
            if (k < h) {
                const real keep = up ? w[k + h] : w[k];
                const real send = up ? w[k] : w[k + h];
                w[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
        }
    }
    const real s = kf_lanes_sum<G>(w[0]);
    if (l % G == 0) g.add(ix.i * S + ix.ty + BY * (l / G), s);
}

// symv's column partials staged in the shared tile part (BY x S), one row per ty, for the store
// to sum over the rows after the barrier the compiler places between them
template <int BY, int S, class VO, class VC, class VP>
KF_DEVICE void usym_colsum_gather(const KfIx& ix, VO& out, VC& cp, VP& part) {
    (void)out;
#pragma unroll
    for (int m = 0; m < S / 32; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) part.at(ix.ty, 32 * m + 4 * ix.tx + e) = cp(4 * m + e);
}

// symv's store: the row sums into out's piece I, the column sums (part summed over its rows) into
// out's piece J; both by atomic adds, since other tiles add to the same entries
template <int BY, int S, class VO, class VP>
KF_DEVICE void symv_ustore(const KfIx& ix, VO& out, VP& part, const KfVec& g) {
    urowsum_store<BY, S>(ix, out, g);
    for (int c = ix.tx + 8 * ix.ty; c < S; c += 8 * BY) {
        real s = 0;
#pragma unroll
        for (int w = 0; w < BY; ++w) s += part.at(w, c);
        g.add(ix.j * S + c, s);
    }
}
