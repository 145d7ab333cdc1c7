// Fused ("flash-style") scaled dot-product attention on the CUDA cores:
//   out[b,h,i,:] = sum_j softmax_j(scale * q_i . k_j + mask_ij) v_j
// with an online softmax over key tiles of 32: the [q_len, k_len] score matrix is never
// stored anywhere; each query row keeps a running max m, a running sum l and an unnormalised
// output accumulator, rescaled by exp(m_old - m_new) whenever the max grows.
//
// Parameters (defined before this file):
//   HEAD_D   the head size d (exact: the region buckets d exactly), 1..MAX_D
//   WARPS    warps a block;  ROWS  query rows a warp;  the block serves WARPS*ROWS rows of one (b, h)
//   CAUSAL   1: query i sees keys 0..i (top-left aligned, as the float64 oracle)
// Lane j of a warp scores key j of the tile; for the output, lane l owns dims l, l+32, ...
// Any strides: q, k, v are addressed with their four element strides each.
// Accumulation is in float for every element type.

#define TILE 32
#define DPL ((HEAD_D + 31) / 32)    // output dims a lane owns
#define BLOCK_ROWS (WARPS * ROWS)
#define KPAD (HEAD_D + 1)           // padded K row: lane j reads row j, conflict-free

extern "C" __global__ void __launch_bounds__(WARPS * 32)
attention_fused(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
                int heads, int q_len, int k_len, float scale,
                long long qb, long long qh, long long qs, long long qd,
                long long kb, long long kh, long long ks, long long kd,
                long long vb, long long vh, long long vs, long long vd)
{
    __shared__ float Qs[BLOCK_ROWS][HEAD_D];
    __shared__ float Ks[TILE][KPAD];
    __shared__ float Vs[TILE][HEAD_D];
    const int bh = blockIdx.y;
    const int b = bh / heads, h = bh % heads;
    const int row0 = blockIdx.x * BLOCK_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const T* q = Q + b * qb + h * qh;
    const T* k = K + b * kb + h * kh;
    const T* v = V + b * vb + h * vh;

    for (int i = threadIdx.x; i < BLOCK_ROWS * HEAD_D; i += WARPS * 32) {
        const int r = i / HEAD_D, d = i % HEAD_D;
        Qs[r][d] = (row0 + r < q_len) ? to_f(q[(row0 + r) * qs + d * qd]) * scale : 0.0f;
    }

    float m[ROWS], l[ROWS], acc[ROWS][DPL];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        m[r] = NEG_INF;
        l[r] = 0.0f;
        #pragma unroll
        for (int t = 0; t < DPL; ++t) acc[r][t] = 0.0f;
    }

    // Keys past the block's last query are masked for every row of it when causal: stop there.
    const int k_end = CAUSAL ? min(k_len, row0 + BLOCK_ROWS) : k_len;
    for (int j0 = 0; j0 < k_end; j0 += TILE) {
        __syncthreads();  // the previous tile is consumed (and Qs written, on the first trip)
        for (int i = threadIdx.x; i < TILE * HEAD_D; i += WARPS * 32) {
            const int j = i / HEAD_D, d = i % HEAD_D;
            const bool in = j0 + j < k_len;
            Ks[j][d] = in ? to_f(k[(j0 + j) * ks + d * kd]) : 0.0f;
            Vs[j][d] = in ? to_f(v[(j0 + j) * vs + d * vd]) : 0.0f;
        }
        __syncthreads();
        const int key = j0 + lane;
        // Scores of this lane's key for the warp's ROWS rows: each K element read once for all of them.
        float s[ROWS];
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) s[r] = 0.0f;
        #pragma unroll 8
        for (int d = 0; d < HEAD_D; ++d) {
            const float key_d = Ks[lane][d];
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) s[r] = fmaf(Qs[warp * ROWS + r][d], key_d, s[r]);
        }
        float p[ROWS];
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int qi = row0 + warp * ROWS + r;
            // Rows past q_len compute on unmasked keys (finite, never stored).
            const bool masked = key >= k_len || (CAUSAL && qi < q_len && key > qi);
            const float sr = masked ? NEG_INF : s[r];
            const float m_new = fmaxf(m[r], warp_max(sr));
            // Key 0 is never masked and comes first, so m_new is finite from the first tile on.
            p[r] = masked ? 0.0f : expf(sr - m_new);
            const float corr = expf(m[r] - m_new);  // exp(-inf) = 0 on the first tile
            l[r] = l[r] * corr + warp_sum(p[r]);
            m[r] = m_new;
            #pragma unroll
            for (int t = 0; t < DPL; ++t) acc[r][t] *= corr;
        }
        // out += p @ V_tile: each V element read once for all ROWS rows; p_j broadcast from lane j.
        #pragma unroll 4
        for (int j = 0; j < TILE; ++j) {
            float pj[ROWS];
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) pj[r] = __shfl_sync(0xffffffffu, p[r], j);
            #pragma unroll
            for (int t = 0; t < DPL; ++t) {
                const int d = lane + 32 * t;
                if (d < HEAD_D) {
                    const float vj = Vs[j][d];
                    #pragma unroll
                    for (int r = 0; r < ROWS; ++r) acc[r][t] = fmaf(pj[r], vj, acc[r][t]);
                }
            }
        }
    }

    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int qi = row0 + warp * ROWS + r;
        if (qi >= q_len) continue;
        const float inv = 1.0f / l[r];
        T* o = O + ((long long)bh * q_len + qi) * HEAD_D;
        #pragma unroll
        for (int t = 0; t < DPL; ++t) {
            const int d = lane + 32 * t;
            if (d < HEAD_D) o[d] = from_f(acc[r][t] * inv);
        }
    }
}
