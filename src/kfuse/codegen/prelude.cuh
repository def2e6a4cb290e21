// ---------------------------------------------------------------------------------------
// kfuse prelude: the types every generated kernel and every library routine relies on.
//   real        the element type chosen at compile time (float or double)
//   KfIx        where a routine runs: its thread (tx, ty) inside the instance, and the
//               instance's element indices (i, j) in the instance space
//   KfVec/KfMat global-memory views with 64-bit offsets; reads outside the array return the
//               fill value (the reduction identity), writes outside it are dropped
//   KfGrid2/3   grid views of a stencil's inputs (extents, boundary rule): get(x, y[, z])
//   KfReg<N>    an element held in registers: slot k of the calling thread is e(k)
//   kf_load16 / kf_store16   4 consecutive entries as 16-byte vector accesses (float4 or
//               2 x double2); KfVec::get4 / put4 use them when they can (mapping "quad"),
//               kf_add16 the 16-byte vector reduction (float on sm_90+), kf_store16_paired
//               the float64 store of two lanes' quads with whole sectors per instruction
// Shared-memory element views are generated per kernel (they depend on the mapping).
// ---------------------------------------------------------------------------------------
#define KF_DEVICE __device__ __forceinline__

struct KfIx {
    int tx, ty;        // thread inside the routine's instance (x, y)
    long long i, j;    // element indices of the instance (j unused by unnested functions)
};

// 4 consecutive entries at a 16-byte aligned address as 16-byte vector accesses: one float4
// (ld/st.global.v4.f32) or two double2 (v2.f64).  Both overloads exist whatever real is.
// The stores are written in PTX: NVVM splits a float4 store into 4 scalar stores when the
// index is built like a quad's (i * 32 + 4 tx), even with the alignment asserted.
KF_DEVICE void kf_load16(const float* p, float (&v)[4]) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
KF_DEVICE void kf_load16(const double* p, double (&v)[4]) {
    const double2 a = reinterpret_cast<const double2*>(p)[0];
    const double2 b = reinterpret_cast<const double2*>(p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
KF_DEVICE void kf_store16(float* p, const float (&v)[4]) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
}
KF_DEVICE void kf_store16(double* p, const double (&v)[4]) {
    asm volatile("st.global.v2.f64 [%0], {%1, %2};\n\tst.global.v2.f64 [%0+16], {%3, %4};"
                 :: "l"(p), "d"(v[0]), "d"(v[1]), "d"(v[2]), "d"(v[3]) : "memory");
}
// 4 consecutive doubles at p (16-byte aligned where ok) stored by lane pairs with whole 32-byte
// sectors per instruction.  kf_store16's two st.v2.f64 write half of every sector each (lanes
// 32 bytes apart); when lanes 2m and 2m+1 are both here (__activemask), both ok and 32 bytes apart,
// they swap halves through shuffles and each instruction writes whole sectors (docs/design.md,
// "float64 stores by lane pairs").
// No branch between the pair's stores, so both lanes issue each one together.  Returns false
// (nothing stored) where no such pair is formed; float: one 16-byte store is already whole sectors.
// Vectors only (KfVec::put4): in tiles (KfMat::put4) it made the model prefer fused `quad` tile
// kernels that ran slower (same section).
KF_DEVICE bool kf_store16_paired(float*, const float (&)[4], bool) { return false; }
KF_DEVICE bool kf_store16_paired(double* p, const double (&v)[4], bool ok) {
    const unsigned active = __activemask();
    unsigned pairs = active & (active >> 1) & 0x55555555u;
    pairs |= pairs << 1;
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    if (!((pairs >> lane) & 1u)) return false;
    const bool odd = lane & 1u;
    const unsigned long long me = reinterpret_cast<unsigned long long>(p);
    const unsigned long long other = __shfl_xor_sync(pairs, me, 1);
    const int partner_ok = __shfl_xor_sync(pairs, (int)ok, 1);    // every shuffle runs in both lanes
    const bool both = ok && partner_ok && other == (odd ? me - 32 : me + 32);
    const double s0 = odd ? v[0] : v[2], s1 = odd ? v[1] : v[3];
    const double r0 = __shfl_xor_sync(pairs, s0, 1), r1 = __shfl_xor_sync(pairs, s1, 1);
    if (!both) return false;
    // even lane: its own entries 0, 1, then its partner's 0, 1 (at p + 4); odd lane: its partner's
    // entries 2, 3 (at p - 2), then its own 2, 3
    double* a = odd ? p - 2 : p;
    double* b = odd ? p + 2 : p + 4;
    asm volatile("st.global.v2.f64 [%0], {%1, %2};" :: "l"(a), "d"(odd ? r0 : v[0]), "d"(odd ? r1 : v[1]) : "memory");
    asm volatile("st.global.v2.f64 [%0], {%1, %2};" :: "l"(b), "d"(odd ? v[2] : r0), "d"(odd ? v[3] : r1) : "memory");
    return true;
}

// 4 consecutive entries added atomically: one 16-byte vector reduction on sm_90 and later
// (red.global.add.v4.f32: a quarter of the atomic operations, which matters where every block adds
// a whole row of column partials: the one-pass strip kernels); double (no vector form) and older
// GPUs: 4 atomics.
KF_DEVICE void kf_add16(float* p, const float (&v)[4]) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
#else
#pragma unroll
    for (int k = 0; k < 4; ++k) atomicAdd(p + k, v[k]);
#endif
}
KF_DEVICE void kf_add16(double* p, const double (&v)[4]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) atomicAdd(p + k, v[k]);
}

struct KfVec {
    real* __restrict__ p;
    long long n;       // entries
    KF_DEVICE real get(long long e, real fill) const { return e < n ? p[e] : fill; }
    KF_DEVICE void put(long long e, real v) const { if (e < n) p[e] = v; }
    KF_DEVICE void add(long long e, real v) const { if (e < n) atomicAdd(p + e, v); }
    // Entries e .. e+3 (mapping "quad").  When all four are inside the array and their address
    // is 16-byte aligned they move as 16-byte accesses (kf_load16 / kf_store16: one for float,
    // two for double); otherwise (an unaligned view, the array ending mid-quad) entry by entry
    // with the bounds checks of get / put.
    KF_DEVICE bool quad_ok(long long e) const {
        return e + 4 <= n
            && ((reinterpret_cast<unsigned long long>(p) + (unsigned long long)e * sizeof(real)) & 15ull) == 0;
    }
    KF_DEVICE void get4(long long e, real (&v)[4], real fill) const {
        if (quad_ok(e)) {
            kf_load16(p + e, v);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k] = get(e + k, fill);
        }
    }
    KF_DEVICE void put4(long long e, const real (&v)[4]) const {
        const bool ok = quad_ok(e);
        if (kf_store16_paired(p + e, v, ok)) return;
        if (ok) {
            kf_store16(p + e, v);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) put(e + k, v[k]);
        }
    }
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
    // Entries (r, c .. c+3) (mapping "qrows"): 16-byte accesses when all four are inside the
    // matrix and aligned, entry by entry with the bounds checks otherwise.
    KF_DEVICE bool quad_ok(long long r, long long c) const {
        return r < rows && c + 4 <= cols
            && ((reinterpret_cast<unsigned long long>(p) + (unsigned long long)(r * cols + c) * sizeof(real)) & 15ull) == 0;
    }
    KF_DEVICE void get4(long long r, long long c, real (&v)[4], real fill) const {
        if (quad_ok(r, c)) {
            kf_load16(p + r * cols + c, v);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k] = get(r, c + k, fill);
        }
    }
    KF_DEVICE void put4(long long r, long long c, const real (&v)[4]) const {
        if (quad_ok(r, c)) {
            kf_store16(p + r * cols + c, v);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) put(r, c + k, v[k]);
        }
    }
};

// Grid views (stencils: library functions declaring grid = 2 or 3).  The array is an
// nz x ny x nx grid (2-D: ny x nx), x fastest (C order); the boundary rule B is compiled in:
// KF_ZERO reads entries past the grid's edges as 0 (homogeneous Dirichlet).  get(x, y, z) applies
// the rule; ld(e) reads entry e, which the caller knows is inside, and quad(e, v) the four
// entries e .. e+3 (inside) as 16-byte accesses when their address is aligned.  Plain loads (no
// __ldg): in a persistent kernel the value was written before a grid barrier of the same launch.
enum { KF_ZERO = 0 };
KF_DEVICE void kf_grid_quad(const real* p, long long e, real (&v)[4]) {
    if (((reinterpret_cast<unsigned long long>(p) + (unsigned long long)e * sizeof(real)) & 15ull) == 0) {
        kf_load16(p + e, v);
    } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = p[e + k];
    }
}
template <int B>
struct KfGrid3 {
    static constexpr int boundary = B;
    const real* __restrict__ p;
    long long nx, ny, nz;
    KF_DEVICE long long n() const { return nx * ny * nz; }
    KF_DEVICE real ld(long long e) const { return p[e]; }
    KF_DEVICE void quad(long long e, real (&v)[4]) const { kf_grid_quad(p, e, v); }
    KF_DEVICE bool inside(long long x, long long y, long long z) const {
        return x >= 0 && x < nx && y >= 0 && y < ny && z >= 0 && z < nz;
    }
    KF_DEVICE real get(long long x, long long y, long long z) const {
        return inside(x, y, z) ? p[(z * ny + y) * nx + x] : real(0);
    }
};
template <int B>
struct KfGrid2 {
    static constexpr int boundary = B;
    const real* __restrict__ p;
    long long nx, ny;
    KF_DEVICE long long n() const { return nx * ny; }
    KF_DEVICE real ld(long long e) const { return p[e]; }
    KF_DEVICE void quad(long long e, real (&v)[4]) const { kf_grid_quad(p, e, v); }
    KF_DEVICE bool inside(long long x, long long y) const { return x >= 0 && x < nx && y >= 0 && y < ny; }
    KF_DEVICE real get(long long x, long long y) const {
        return inside(x, y) ? p[y * nx + x] : real(0);
    }
};

// ---- elementwise math of synthesized functions (library/synth.py) ------------------------
// One name for float and double (real is either), NumPy's semantics: maximum and minimum
// propagate NaN (np.maximum), division by zero and log of a negative number give inf and NaN.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
KF_DEVICE float kf_exp(float x) { return expf(x); }
KF_DEVICE double kf_exp(double x) { return exp(x); }
KF_DEVICE float kf_log(float x) { return logf(x); }
KF_DEVICE double kf_log(double x) { return log(x); }
KF_DEVICE float kf_sqrt(float x) { return sqrtf(x); }
KF_DEVICE double kf_sqrt(double x) { return sqrt(x); }
KF_DEVICE float kf_tanh(float x) { return tanhf(x); }
KF_DEVICE double kf_tanh(double x) { return tanh(x); }
KF_DEVICE float kf_sin(float x) { return sinf(x); }
KF_DEVICE double kf_sin(double x) { return sin(x); }
KF_DEVICE float kf_cos(float x) { return cosf(x); }
KF_DEVICE double kf_cos(double x) { return cos(x); }
KF_DEVICE float kf_abs(float x) { return fabsf(x); }
KF_DEVICE double kf_abs(double x) { return fabs(x); }
KF_DEVICE float kf_pow(float x, float y) { return powf(x, y); }
KF_DEVICE double kf_pow(double x, double y) { return pow(x, y); }
KF_DEVICE float kf_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
KF_DEVICE double kf_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
template <class T> KF_DEVICE T kf_maximum(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> KF_DEVICE T kf_minimum(T a, T b) { return (a != a || a < b) ? a : b; }
template <class T> KF_DEVICE T kf_where(bool c, T a, T b) { return c ? a : b; }

// *p = max(*p, v) / min(*p, v) atomically, NaN propagating: a compare-and-swap loop on the bits
// (no hardware float max); the output is cleared to -inf / +inf first (schema.REDUCE_OPS).
KF_DEVICE void kf_atomic_max(float* p, float v) {
    int* a = reinterpret_cast<int*>(p);
    int old = *a, seen;
    do {
        seen = old;
        const float now = kf_maximum(__int_as_float(seen), v);
        if (__float_as_int(now) == seen) return;
        old = atomicCAS(a, seen, __float_as_int(now));
    } while (old != seen);
}
KF_DEVICE void kf_atomic_max(double* p, double v) {
    unsigned long long* a = reinterpret_cast<unsigned long long*>(p);
    unsigned long long old = *a, seen;
    do {
        seen = old;
        const double now = kf_maximum(__longlong_as_double((long long)seen), v);
        if ((unsigned long long)__double_as_longlong(now) == seen) return;
        old = atomicCAS(a, seen, (unsigned long long)__double_as_longlong(now));
    } while (old != seen);
}
KF_DEVICE void kf_atomic_min(float* p, float v) {
    int* a = reinterpret_cast<int*>(p);
    int old = *a, seen;
    do {
        seen = old;
        const float now = kf_minimum(__int_as_float(seen), v);
        if (__float_as_int(now) == seen) return;
        old = atomicCAS(a, seen, __float_as_int(now));
    } while (old != seen);
}
KF_DEVICE void kf_atomic_min(double* p, double v) {
    unsigned long long* a = reinterpret_cast<unsigned long long*>(p);
    unsigned long long old = *a, seen;
    do {
        seen = old;
        const double now = kf_minimum(__longlong_as_double((long long)seen), v);
        if ((unsigned long long)__double_as_longlong(now) == seen) return;
        old = atomicCAS(a, seen, (unsigned long long)__double_as_longlong(now));
    } while (old != seen);
}

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

// Maximum / minimum over the 32 lanes of a warp, NaN propagating (every lane gets it).  All 32
// lanes must call them.  For the max / min reductions of synthesized functions (library/synth.py).
KF_DEVICE real kf_warp_max(real v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = kf_maximum(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
KF_DEVICE real kf_warp_min(real v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = kf_minimum(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over each aligned group of W lanes (W = 1, 2, 4, 8, 16 or 32: lanes W g .. W g + W-1);
// every lane gets its group's total.  All 32 lanes must call it.
template <int W>
KF_DEVICE real kf_lanes_sum(real v) {
    static_assert(W >= 1 && W <= 32 && (W & (W - 1)) == 0, "kf_lanes_sum: W is a power of two <= 32");
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Programmatic dependent launch (sm_90 and later).  A kernel after a clear (kf_fill) or after
// another kernel of the plan is launched while that one still runs; it calls kf_wait_prior()
// before it first touches an output the clear writes or reads what an earlier kernel wrote,
// which waits for the launch before it to finish and its writes to be visible.  A kernel that
// touches nothing of the kind, launched early after its clears (the outputs of later kernels),
// calls it at its end: it runs beside the clears but finishes after them.  A kernel built
// with bit 2 of its order (runtime/order.py: a grid of at most two waves, and a next kernel that
// waits for it) and kf_fill call kf_allow_next() at their start: once all their blocks have
// started, the next one may launch (its blocks then wait on the GPU instead of in the launch
// queue).  Launched the ordinary way, or built for an older GPU, all are no-ops.
KF_DEVICE void kf_wait_prior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
KF_DEVICE void kf_allow_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Thread-block clusters (sm_90 and later): a kernel of cluster variants is compiled with
// __cluster_dims__(C, 1, 1), and the C blocks of a cluster read each other's shared memory
// (distributed shared memory).  kf_cluster_get(p, rank) reads the entry
// that p addresses in the caller's own shared memory from the shared memory of block `rank` of
// its cluster; kf_cluster_sync() is the cluster's barrier (every thread of every block: writes
// to shared memory before it are seen by the cluster's reads after it), which the compiler places
// where a block would place __syncthreads().  Built for an older GPU, a cluster is one block.
KF_DEVICE void kf_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __syncthreads();
#endif
}
// the 32-bit address in the shared memory of block `rank` of the cluster of what p addresses in
// the caller's own
KF_DEVICE unsigned kf_cluster_address(const void* p, unsigned rank) {
    unsigned a = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("{\n\t.reg .u64 s;\n\tcvta.to.shared.u64 s, %1;\n\tcvt.u32.u64 %0, s;\n\t}" : "=r"(a) : "l"(p));
    asm("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(a) : "r"(rank));
#endif
    return a;
}
KF_DEVICE float kf_cluster_get(const float* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(kf_cluster_address(p, rank)) : "memory");
    return v;
#else
    return *p;
#endif
}
KF_DEVICE double kf_cluster_get(const double* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    double v;
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(kf_cluster_address(p, rank)) : "memory");
    return v;
#else
    return *p;
#endif
}

// Set n entries at p and n2 at p2 to value (two blocks in one launch: a call's returned outputs
// and its temporaries); lets the next kernel launch at once (see kf_wait_prior).  Launched early
// after another fill, it finishes after it (the wait at its end), so that whatever waits for the
// last of a kernel's fills finds them all done.
extern "C" __global__ void kf_fill(real* __restrict__ p, long long n, real* __restrict__ p2, long long n2,
                                   real value) {
    kf_allow_next();
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n + n2; e += (long long)gridDim.x * blockDim.x) {
        if (e < n)
            p[e] = value;
        else
            p2[e - n] = value;
    }
    kf_wait_prior();
}
