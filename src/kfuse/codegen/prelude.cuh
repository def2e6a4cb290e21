// ---------------------------------------------------------------------------------------
// kfuse prelude: the types every generated kernel and every library routine relies on.
//   real        the element type chosen at compile time (float or double)
//   KfIx        where a routine runs: its thread (tx, ty) inside the instance, and the
//               instance's element indices (i, j) in the instance space
//   KfVec/KfMat global-memory views with 64-bit offsets; reads outside the array return the
//               fill value (the reduction identity), writes outside it are dropped
//   KfReg<N>    an element held in registers: slot k of the calling thread is e(k)
// Shared-memory element views are generated per kernel (they depend on the mapping).
// ---------------------------------------------------------------------------------------
#define KF_DEVICE __device__ __forceinline__

struct KfIx {
    int tx, ty;        // thread inside the routine's instance (x, y)
    long long i, j;    // element indices of the instance (j unused by unnested functions)
};

struct KfVec {
    real* __restrict__ p;
    long long n;       // entries
    KF_DEVICE real get(long long e, real fill) const { return e < n ? p[e] : fill; }
    KF_DEVICE void put(long long e, real v) const { if (e < n) p[e] = v; }
    KF_DEVICE void add(long long e, real v) const { if (e < n) atomicAdd(p + e, v); }
};

struct KfMat {           // row-major, rows x cols, leading dimension cols
    real* __restrict__ p;
    long long rows, cols;
    KF_DEVICE real get(long long r, long long c, real fill) const {
        return (r < rows && c < cols) ? p[r * cols + c] : fill;
    }
    KF_DEVICE void put(long long r, long long c, real v) const {
        if (r < rows && c < cols) p[r * cols + c] = v;
    }
    KF_DEVICE void add(long long r, long long c, real v) const {
        if (r < rows && c < cols) atomicAdd(p + r * cols + c, v);
    }
};

template <int N>
struct KfReg {
    static constexpr int slots = N;   // entries this thread holds
    real v[N];
    KF_DEVICE real& operator()(int k) { return v[k]; }
};

// Sum over the 32 lanes of a warp; every lane gets the total.  All 32 lanes must call it.
KF_DEVICE real kf_warp_sum(real v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
