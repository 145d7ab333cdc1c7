// LayerNorm over the last axis of a row-major [rows, cols] array, any cols up to
// ROW_THREADS * ITERS * VEC: y = (x - mean) / sqrt(var + eps) * w (+ b), biased variance.
// One read and one write of global memory: the row stays in registers (rows_common.cuh), so the
// variance is taken in a second pass over the registers around the mean (no E[x^2] - mean^2
// cancellation on rows with a large mean).
// The mean is taken of x - x[row, 0] (the row shifted by its first element, read once per row and
// broadcast to the row's threads): that difference is exact wherever x is near x[row, 0], so a row
// that is exactly constant sums to exactly 0 in any order, its mean is exactly its value and its
// answer exactly the bias. Unshifted, the float32 sum of a constant row at a non-integer value
// (131.325) rounds, the mean misses the constant by a few ulps and (x - mean) / sqrt(eps)
// magnifies the miss (issue 38 item 1; the gate's eps_dominated rows).
// HAS_BIAS (0 or 1) says whether B is read.

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_rows(const T* __restrict__ X, const T* __restrict__ W, const T* __restrict__ B, T* __restrict__ Y,
               int rows, int cols, long long ldx, long long ldy, float eps)
{
    __shared__ float scratch[ROWS_PER_BLOCK * WARPS_PER_ROW];
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    const int t = threadIdx.x % ROW_THREADS;
    const bool active = row < rows;
    const long long r = active ? row : 0;
    // One load a row (the same address for all of its threads: one transaction a warp, from cache).
    const float shift = active ? to_f(X[r * ldx]) : 0.0f;
    float v[ITERS][VEC];
    // Padding past `cols` holds the shift, so it adds exactly 0 to the shifted sum.
    load_row(X + r * ldx, cols, active, shift, v);

    float s = 0.0f;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) s += v[it][e] - shift;
    const float mean = shift + row_reduce(s, false, scratch) / (float)cols;

    float ss = 0.0f;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {
            // Padding past `cols` would count as (shift - mean)^2: mask it out.
            const float d = ((it * ROW_THREADS + t) * VEC + e < cols) ? v[it][e] - mean : 0.0f;
            v[it][e] = d;
            ss = fmaf(d, d, ss);
        }
    const float rstd = rsqrtf(row_reduce(ss, false, scratch) / (float)cols + eps);

    float w[ITERS][VEC];
    load_row(W, cols, true, 0.0f, w);
#if HAS_BIAS
    float b[ITERS][VEC];
    load_row(B, cols, true, 0.0f, b);
#endif
    #pragma unroll
    for (int it = 0; it < ITERS; ++it)
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {
#if HAS_BIAS
            v[it][e] = fmaf(v[it][e] * rstd, w[it][e], b[it][e]);
#else
            v[it][e] = v[it][e] * rstd * w[it][e];
#endif
        }
    store_row(Y + r * ldy, cols, active, v);
}
