// GEMV: y[M] = epilogue(A[M,K] @ x[K]) (a matmul with N == 1), one warp per row of A.
//
// Parameters (defined before this file):
//   ROWS  warps (rows of A) per block
//   VEC   1 (scalar loads) or VEC16 (16-byte loads; the caller guarantees that every row
//         of A and x start 16-byte aligned); the K % VEC tail is finished with scalar loads.
// Each lane accumulates a strided slice of the row in float; a warp shuffle sums them.

__device__ __forceinline__ float dot16(uint4 a, uint4 b) {
    float fa[VEC16], fb[VEC16];
    unpack16(a, fa);
    unpack16(b, fb);
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < VEC16; ++i) s = fmaf(fa[i], fb[i], s);
    return s;
}

extern "C" __global__ void __launch_bounds__(ROWS * 32)
gemv_warp(const T* __restrict__ A, const T* __restrict__ x, TO* __restrict__ y,
          int M, int K, long long lda, long long ldy,
          const T* __restrict__ bias, const T* __restrict__ residual, long long ldr)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS + threadIdx.x / 32;
    if (row >= M) return;  // no block-wide barrier below, so whole warps may leave
    const T* a = A + row * lda;
    float s = 0.0f;
    int k_done = 0;
#if VEC > 1
    const int nvec = K / VEC;
    const uint4* av = reinterpret_cast<const uint4*>(a);
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    // Four independent 16-byte loads in flight per lane before any arithmetic uses them.
    float s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int i = lane;
    for (; i + 96 < nvec; i += 128) {
        const uint4 a0 = __ldg(av + i), a1 = __ldg(av + i + 32), a2 = __ldg(av + i + 64), a3 = __ldg(av + i + 96);
        const uint4 x0 = __ldg(xv + i), x1 = __ldg(xv + i + 32), x2 = __ldg(xv + i + 64), x3 = __ldg(xv + i + 96);
        s += dot16(a0, x0); s1 += dot16(a1, x1); s2 += dot16(a2, x2); s3 += dot16(a3, x3);
    }
    for (; i < nvec; i += 32) s += dot16(__ldg(av + i), __ldg(xv + i));
    s += (s1 + s2) + s3;
    k_done = nvec * VEC;
#endif
    for (int k = k_done + lane; k < K; k += 32) s = fmaf(to_f(a[k]), to_f(x[k]), s);
    s = warp_sum(s);
    if (lane == 0) y[row * ldy] = to_out(arb_epilogue(s, row, 0, bias, residual, ldr));
}
