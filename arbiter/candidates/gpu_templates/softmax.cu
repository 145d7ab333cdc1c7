// Softmax over the last axis of a row-major [rows, cols] array, any cols up to
// ROW_THREADS * ITERS * VEC: y = exp(x - max) / sum(exp(x - max)).
// One read and one write of global memory: the row stays in registers (rows_common.cuh).

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_rows(const T* __restrict__ X, T* __restrict__ Y, int rows, int cols, long long ldx, long long ldy)
{
    __shared__ float scratch[ROWS_PER_BLOCK * WARPS_PER_ROW];
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    const bool active = row < rows;
    const long long r = active ? row : 0;
    float v[ITERS][VEC];
    load_row(X + r * ldx, cols, active, NEG_INF, v);

    float m = NEG_INF;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) m = fmaxf(m, v[it][e]);
    m = row_reduce(m, true, scratch);

    float s = 0.0f;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {
            v[it][e] = expf(v[it][e] - m);  // padding: exp(-inf) = 0
            s += v[it][e];
        }
    s = row_reduce(s, false, scratch);

    const float inv = 1.0f / s;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) v[it][e] *= inv;
    store_row(Y + r * ldy, cols, active, v);
}
