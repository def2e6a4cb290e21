// Diagonal scaling: the element-wise product of two vectors (vmul), e.g. a Jacobi preconditioner
// z = D^-1 r given the inverse diagonal as a vector.  Its variants take their loads and stores
// from blas1.cu and blas1_rows.cu (the same accesses as vadd's); only the products live here.

// out = x .* y (every mapping: each thread's own slots)
template <class VX, class VY, class VO>
KF_DEVICE void vmul_compute(const KfIx& ix, VX& x, VY& y, VO& out) {
#pragma unroll
    for (int k = 0; k < VO::slots; ++k) out(k) = x(k) * y(k);
}

// on the rows of a nested kernel's strips (blas1_rows.cu): out = x .* y over the strip's R rows
template <int BY, int R, int NC, class VX, class VY, class VO>
KF_DEVICE void vmul_rows(const KfIx& ix, VX& x, VY& y, VO& out) {
#pragma unroll
    for (int r = 0; r < R; ++r) out(r) = x(r) * y(r);
}
