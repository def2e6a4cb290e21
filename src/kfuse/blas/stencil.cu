// Stencils over 2-D and 3-D grids (stencil.toml): Laplacians of 5 points (2-D), 7 and 27 points
// (3-D), constant and variable coefficient.  One instance is one 32-entry subvector of the grid
// in memory order (x fastest), 8 threads of 4 consecutive entries each (mapping "quad", as
// blas1.cu's quad variant: its store writes the result, and maps and reductions of the result
// fuse with the stencil in the same mapping).  The grid arrives as a KfGrid2/KfGrid3 view
// (prelude): extents, boundary rule (KF_ZERO: entries past the edges read as 0).
//
// Fast path: a thread's 4 points lie in one grid row (x .. x+3 < nx), so each neighbouring row
// (y +- 1, z +- 1, and the 9 rows around it for the 27-point box) is one 16-byte-aligned quad
// (16-byte accesses when nx keeps rows aligned) plus the entries at x-1 and x+4; the neighbours
// come from L1/L2 (the blocks resident at once cover consecutive rows and planes), so DRAM sees
// about one read of the grid.  Otherwise (a row ending inside the quad, the grid's last
// subvector) point by point through get(), which applies the boundary rule.

// (x, y, z) of entry e of an nz x ny x nx grid; 32-bit division when the grid allows it
KF_DEVICE void kf_grid_xyz(long long e, long long nx, long long ny, long long n,
                           long long& x, long long& y, long long& z) {
    if (n <= 0x7fffffffLL) {
        const unsigned ue = (unsigned)e, unx = (unsigned)nx, uny = (unsigned)ny;
        const unsigned r = ue / unx, q = r / uny;
        x = ue - r * unx; y = r - q * uny; z = q;
    } else {
        const long long r = e / nx, q = r / ny;
        x = e - r * nx; y = r - q * ny; z = q;
    }
}

// the four entries of row `base` (inside) at x .. x+3 and its neighbours at x-1, x+4 (0 past the
// row's ends): w[0] = entry x-1, w[1..4] = x .. x+3, w[5] = x+4
template <class G>
KF_DEVICE void kf_row6(const G& u, long long base, long long x, real (&w)[6]) {
    real q[4];
    u.quad(base, q);
    w[0] = x > 0 ? u.ld(base - 1) : real(0);
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k + 1] = q[k];
    w[5] = x + 4 < u.nx ? u.ld(base + 4) : real(0);
}

// ---- 3-D, 7 points: out = 6 u - (the 6 axis neighbours) ------------------------------------
template <class G>
KF_DEVICE real lap7_point(const G& u, long long x, long long y, long long z) {
    return real(6) * u.get(x, y, z) - u.get(x - 1, y, z) - u.get(x + 1, y, z) - u.get(x, y - 1, z)
         - u.get(x, y + 1, z) - u.get(x, y, z - 1) - u.get(x, y, z + 1);
}

template <class G, class VO>
KF_DEVICE void lap7_compute(const KfIx& ix, const G& u, VO& out) {
    static_assert(VO::slots == 4, "lap7_compute: mapping \"quad\" has 4 slots per thread");
    static_assert(G::boundary == KF_ZERO, "lap7_compute: boundary rule \"zero\"");
    const long long n = u.n(), e0 = ix.i * KF_SUB + 4 * ix.tx;
    if (e0 >= n) {
#pragma unroll
        for (int k = 0; k < 4; ++k) out(k) = real(0);   // past the grid: the store drops it
        return;
    }
    long long x, y, z;
    kf_grid_xyz(e0, u.nx, u.ny, n, x, y, z);
    if (x + 4 <= u.nx) {
        real w[6], q[4], acc[4];
        kf_row6(u, e0, x, w);
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[k] = real(6) * w[k + 1] - w[k] - w[k + 2];
        const long long plane = u.nx * u.ny;
        if (y > 0) {
            u.quad(e0 - u.nx, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] -= q[k];
        }
        if (y + 1 < u.ny) {
            u.quad(e0 + u.nx, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] -= q[k];
        }
        if (z > 0) {
            u.quad(e0 - plane, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] -= q[k];
        }
        if (z + 1 < u.nz) {
            u.quad(e0 + plane, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] -= q[k];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) out(k) = acc[k];
        return;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (e0 + k < n) {
            kf_grid_xyz(e0 + k, u.nx, u.ny, n, x, y, z);
            out(k) = lap7_point(u, x, y, z);
        } else {
            out(k) = real(0);
        }
    }
}

// ---- 3-D, 27 points (HPCG's operator): out = 26 u - (the 26 neighbours of the 3x3x3 box) ----
template <class G>
KF_DEVICE real lap27_point(const G& u, long long x, long long y, long long z) {
    real box = real(0);
    for (int dz = -1; dz <= 1; ++dz)
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx)
                box += u.get(x + dx, y + dy, z + dz);
    return real(27) * u.get(x, y, z) - box;
}

template <class G, class VO>
KF_DEVICE void lap27_compute(const KfIx& ix, const G& u, VO& out) {
    static_assert(VO::slots == 4, "lap27_compute: mapping \"quad\" has 4 slots per thread");
    static_assert(G::boundary == KF_ZERO, "lap27_compute: boundary rule \"zero\"");
    const long long n = u.n(), e0 = ix.i * KF_SUB + 4 * ix.tx;
    if (e0 >= n) {
#pragma unroll
        for (int k = 0; k < 4; ++k) out(k) = real(0);
        return;
    }
    long long x, y, z;
    kf_grid_xyz(e0, u.nx, u.ny, n, x, y, z);
    if (x + 4 <= u.nx) {
        real w[6], box[4] = {real(0), real(0), real(0), real(0)}, c[4];
        const long long plane = u.nx * u.ny;
#pragma unroll
        for (int dz = -1; dz <= 1; ++dz) {
#pragma unroll
            for (int dy = -1; dy <= 1; ++dy) {
                if (y + dy < 0 || y + dy >= u.ny || z + dz < 0 || z + dz >= u.nz) continue;
                kf_row6(u, e0 + dy * u.nx + dz * plane, x, w);
                if (dy == 0 && dz == 0) {
#pragma unroll
                    for (int k = 0; k < 4; ++k) c[k] = w[k + 1];
                }
#pragma unroll
                for (int k = 0; k < 4; ++k) box[k] += w[k] + w[k + 1] + w[k + 2];
            }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) out(k) = real(27) * c[k] - box[k];
        return;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (e0 + k < n) {
            kf_grid_xyz(e0 + k, u.nx, u.ny, n, x, y, z);
            out(k) = lap27_point(u, x, y, z);
        } else {
            out(k) = real(0);
        }
    }
}

// ---- 2-D, 5 points: out = 4 u - (the 4 axis neighbours) ------------------------------------
template <class G, class VO>
KF_DEVICE void lap5_compute(const KfIx& ix, const G& u, VO& out) {
    static_assert(VO::slots == 4, "lap5_compute: mapping \"quad\" has 4 slots per thread");
    static_assert(G::boundary == KF_ZERO, "lap5_compute: boundary rule \"zero\"");
    const long long n = u.n(), e0 = ix.i * KF_SUB + 4 * ix.tx;
    if (e0 >= n) {
#pragma unroll
        for (int k = 0; k < 4; ++k) out(k) = real(0);
        return;
    }
    long long x, y, z;
    kf_grid_xyz(e0, u.nx, u.ny, n, x, y, z);      // z: 0 (one plane)
    if (x + 4 <= u.nx) {
        real w[6], q[4], acc[4];
        kf_row6(u, e0, x, w);
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[k] = real(4) * w[k + 1] - w[k] - w[k + 2];
        if (y > 0) {
            u.quad(e0 - u.nx, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] -= q[k];
        }
        if (y + 1 < u.ny) {
            u.quad(e0 + u.nx, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] -= q[k];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) out(k) = acc[k];
        return;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (e0 + k < n) {
            kf_grid_xyz(e0 + k, u.nx, u.ny, n, x, y, z);
            out(k) = real(4) * u.get(x, y) - u.get(x - 1, y) - u.get(x + 1, y) - u.get(x, y - 1) - u.get(x, y + 1);
        } else {
            out(k) = real(0);
        }
    }
}

// ---- variable coefficient: out = sum over the neighbours nb of (c + c_nb) / 2 (u - u_nb) -------
// (the divergence form -div(c grad u) with the coefficient averaged on each face); a neighbour
// past the grid's edge has u_nb = 0 and its face takes the point's own coefficient c.  Point by
// point (the neighbours from L1/L2).  c and u may be views of different types (a halo view of a
// value made in the same kernel: codegen/halo.py).
template <class GC, class GU>
KF_DEVICE real kf_face(const GC& c, const GU& u, real cc, real uc, long long x, long long y, long long z,
                       int dx, int dy, int dz) {
    if (!c.inside(x + dx, y + dy, z + dz)) return cc * uc;
    const long long e = ((z + dz) * c.ny + (y + dy)) * c.nx + (x + dx);
    return real(0.5) * (cc + c.ld(e)) * (uc - u.ld(e));
}

template <class GC, class GU>
KF_DEVICE real kf_face2(const GC& c, const GU& u, real cc, real uc, long long x, long long y, int dx, int dy) {
    if (!c.inside(x + dx, y + dy)) return cc * uc;
    const long long e = (y + dy) * c.nx + (x + dx);
    return real(0.5) * (cc + c.ld(e)) * (uc - u.ld(e));
}

template <class GC, class GU, class VO>
KF_DEVICE void lap7v_compute(const KfIx& ix, const GC& c, const GU& u, VO& out) {
    static_assert(VO::slots == 4, "lap7v_compute: mapping \"quad\" has 4 slots per thread");
    static_assert(GC::boundary == KF_ZERO && GU::boundary == KF_ZERO, "lap7v_compute: boundary rule \"zero\"");
    const long long n = u.n(), e0 = ix.i * KF_SUB + 4 * ix.tx;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        real acc = real(0);
        if (e0 + k < n) {
            long long x, y, z;
            kf_grid_xyz(e0 + k, u.nx, u.ny, n, x, y, z);
            const real cc = c.ld(e0 + k), uc = u.ld(e0 + k);
            acc = kf_face(c, u, cc, uc, x, y, z, -1, 0, 0) + kf_face(c, u, cc, uc, x, y, z, 1, 0, 0)
                + kf_face(c, u, cc, uc, x, y, z, 0, -1, 0) + kf_face(c, u, cc, uc, x, y, z, 0, 1, 0)
                + kf_face(c, u, cc, uc, x, y, z, 0, 0, -1) + kf_face(c, u, cc, uc, x, y, z, 0, 0, 1);
        }
        out(k) = acc;
    }
}

template <class GC, class GU, class VO>
KF_DEVICE void lap27v_compute(const KfIx& ix, const GC& c, const GU& u, VO& out) {
    static_assert(VO::slots == 4, "lap27v_compute: mapping \"quad\" has 4 slots per thread");
    static_assert(GC::boundary == KF_ZERO && GU::boundary == KF_ZERO, "lap27v_compute: boundary rule \"zero\"");
    const long long n = u.n(), e0 = ix.i * KF_SUB + 4 * ix.tx;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        real acc = real(0);
        if (e0 + k < n) {
            long long x, y, z;
            kf_grid_xyz(e0 + k, u.nx, u.ny, n, x, y, z);
            const real cc = c.ld(e0 + k), uc = u.ld(e0 + k);
            for (int dz = -1; dz <= 1; ++dz)
                for (int dy = -1; dy <= 1; ++dy)
                    for (int dx = -1; dx <= 1; ++dx)
                        if (dx || dy || dz) acc += kf_face(c, u, cc, uc, x, y, z, dx, dy, dz);
        }
        out(k) = acc;
    }
}

template <class GC, class GU, class VO>
KF_DEVICE void lap5v_compute(const KfIx& ix, const GC& c, const GU& u, VO& out) {
    static_assert(VO::slots == 4, "lap5v_compute: mapping \"quad\" has 4 slots per thread");
    static_assert(GC::boundary == KF_ZERO && GU::boundary == KF_ZERO, "lap5v_compute: boundary rule \"zero\"");
    const long long n = u.n(), e0 = ix.i * KF_SUB + 4 * ix.tx;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        real acc = real(0);
        if (e0 + k < n) {
            long long x, y, z;
            kf_grid_xyz(e0 + k, u.nx, u.ny, n, x, y, z);
            const real cc = c.ld(e0 + k), uc = u.ld(e0 + k);
            acc = kf_face2(c, u, cc, uc, x, y, -1, 0) + kf_face2(c, u, cc, uc, x, y, 1, 0)
                + kf_face2(c, u, cc, uc, x, y, 0, -1) + kf_face2(c, u, cc, uc, x, y, 0, 1);
        }
        out(k) = acc;
    }
}
