// One-pass ATAX by hand (issue 18): y = A^T (A x) reading A once from memory.
//
// A block walks row strips of R rows (grid-stride, a persistent grid). Every thread holds its
// columns of x and of its y partials in registers for the whole kernel; for each strip it loads
// its columns of the R rows (16-byte accesses, coalesced), reduces the R partial dots over the
// block (warp shuffles, then one value per warp through shared memory, one barrier), and applies
// the finished t_r = A_r . x to the same registers: y_part += A_r^T t_r.  The block's y partials
// are added to y once at the end (one atomic per column per block; y cleared before the launch).
// Rows must fit the block: NCOLS = THREADS * 4 * V (V 16-byte vectors per thread per row).
#include <cuda_runtime.h>

template <class T> struct Vec;
template <> struct Vec<float>  { using type = float4; static constexpr int n = 4; };
template <> struct Vec<double> { using type = double2; static constexpr int n = 2; };

template <class T>
__device__ __forceinline__ T dot(const typename Vec<T>::type& a, const typename Vec<T>::type& b);
template <> __device__ __forceinline__ float dot<float>(const float4& a, const float4& b) {
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
template <> __device__ __forceinline__ double dot<double>(const double2& a, const double2& b) {
    return a.x * b.x + a.y * b.y;
}
__device__ __forceinline__ void axpy4(float4& y, const float4& a, float t) {
    y.x += a.x * t; y.y += a.y * t; y.z += a.z * t; y.w += a.w * t;
}
__device__ __forceinline__ void axpy4(double2& y, const double2& a, double t) {
    y.x += a.x * t; y.y += a.y * t;
}
__device__ __forceinline__ void add_out(float* y, const float4& v) {
    atomicAdd(y, v.x); atomicAdd(y + 1, v.y); atomicAdd(y + 2, v.z); atomicAdd(y + 3, v.w);
}
__device__ __forceinline__ void add_out(double* y, const double2& v) {
    atomicAdd(y, v.x); atomicAdd(y + 1, v.y);
}

template <class T, int THREADS, int V, int R>
__global__ void __launch_bounds__(THREADS) atax_onepass(const T* __restrict__ A, const T* __restrict__ x,
                                                        T* __restrict__ y, long long nrows) {
    using VT = typename Vec<T>::type;
    constexpr int W = THREADS / 32;
    constexpr long long NV = (long long)THREADS * V;            // 16-byte vectors per row
    __shared__ T red[2][R][W];                                  // two buffers: one barrier per strip
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    VT xr[V], yp[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
        xr[v] = reinterpret_cast<const VT*>(x)[t + THREADS * v];
        yp[v] = VT{};
    }
    int buf = 0;
    for (long long r0 = (long long)blockIdx.x * R; r0 < nrows; r0 += (long long)gridDim.x * R) {
        VT a[R][V];
        T s[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const VT* row = reinterpret_cast<const VT*>(A) + (r0 + r) * NV;
#pragma unroll
            for (int v = 0; v < V; ++v)
                a[r][v] = (r0 + r < nrows) ? row[t + THREADS * v] : VT{};
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            T acc = 0;
#pragma unroll
            for (int v = 0; v < V; ++v) acc += dot<T>(a[r][v], xr[v]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            s[r] = acc;
        }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r) red[buf][r][warp] = s[r];
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; ++r) {
            T tr = 0;
#pragma unroll
            for (int w = 0; w < W; ++w) tr += red[buf][r][w];
#pragma unroll
            for (int v = 0; v < V; ++v) axpy4(yp[v], a[r][v], tr);
        }
        buf ^= 1;
    }
#pragma unroll
    for (int v = 0; v < V; ++v)
        add_out(y + (long long)(t + THREADS * v) * Vec<T>::n, yp[v]);
}
