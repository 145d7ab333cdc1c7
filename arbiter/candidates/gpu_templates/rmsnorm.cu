// RMSNorm over the last axis of a row-major [rows, cols] array, any cols up to
// ROW_THREADS * ITERS * VEC: y = x / sqrt(mean(x^2) + eps) * w.
// One read and one write of global memory: the row stays in registers (rows_common.cuh).

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_rows(const T* __restrict__ X, const T* __restrict__ W, T* __restrict__ Y,
             int rows, int cols, long long ldx, long long ldy, float eps)
{
    __shared__ float scratch[ROWS_PER_BLOCK * WARPS_PER_ROW];
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    const bool active = row < rows;
    const long long r = active ? row : 0;
    float v[ITERS][VEC];
    load_row(X + r * ldx, cols, active, 0.0f, v);

    float ss = 0.0f;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) ss = fmaf(v[it][e], v[it][e], ss);
    ss = row_reduce(ss, false, scratch);
    const float scale = rsqrtf(ss / (float)cols + eps);

    float w[ITERS][VEC];
    load_row(W, cols, true, 0.0f, w);
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) v[it][e] = v[it][e] * scale * w[it][e];
    store_row(Y + r * ldy, cols, active, v);
}
