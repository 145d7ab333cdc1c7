// Tensor-core flash attention for float16 / bfloat16 (FlashAttention-2 style, mma.sync m16n8k16, sm_80+):
//   out[b,h,i,:] = sum_j softmax_j(scale * q_i . k_j + mask_ij) v_j
// One block serves BQ query rows of one (b, h); each of its BQ/16 warps owns 16 of them. The block walks
// the keys in tiles of BK, staged in shared memory (cp.async 16-byte copies: K[j] and V[j]); a warp computes
// S = Q K^T for its 16 rows with mma, keeps a running max m and sum l per row in float (online softmax:
// the accumulator is rescaled by exp(m_old - m_new) whenever the max grows; the max is subtracted before
// exp, so logits near the exp range never overflow), rounds P to the element type in registers and adds
// P V with mma. The [q_len, k_len] scores never leave registers. O / l is written at the end.
//
// Parameters (defined before this file):
//   HEAD_D   64 or 128;  BQ  query rows a block (64 or 128: BQ/16 warps);  BK  keys a tile (32 or 64)
//   CAUSAL   1: query i sees keys 0..i (top-left aligned, as the float64 oracle)
//   STRIDED  0: q, k, v rows are unit-stride and start on 16-byte boundaries (cp.async, 32-bit fragment
//            loads); 1: any strides (element loads, the same arithmetic)
//   MMA_TYPE "f16" or "bf16" (the PTX operand type)
// Out is C-contiguous [b, h, q_len, HEAD_D]. Keys past k_len are zero-filled in shared memory and scored
// -inf; query rows past q_len read zeros and are never stored.
//
// Fragment layouts (PTX ISA, m16n8k16; lane = 4*group + tig): A (row-major 16x16) regs (group, 2tig..+1),
// (group+8, 2tig..), (group, 2tig+8..), (group+8, 2tig+8..); B (col-major 16x8) regs (k 2tig..+1, n group),
// (k 2tig+8.., n group); C (group, 2tig..+1) and (group+8, 2tig..+1). The C fragments of two adjacent
// 8-key score tiles are, packed in pairs, exactly the A fragment of P for those 16 keys (FA2's reuse).
// ldmatrix x4: lanes 8i..8i+7 give the row addresses of matrix i; register i of every lane receives
// matrix i's (row group, cols 2tig..+1), or with .trans its (rows 2tig..+1, col group).

#define WARPS (BQ / 16)
#define THREADS (WARPS * 32)
#define SROW (HEAD_D + 8)     // shared row in halves: 16 bytes of padding make 8 ldmatrix rows conflict-free
#define NT (BK / 8)           // 8-key score tiles a key tile
#define DT (HEAD_D / 8)       // 8-dim output tiles
#define KD (HEAD_D / 16)      // 16-dim k-steps of Q K^T
#define CHUNKS (HEAD_D / 8)   // 16-byte chunks a row
#define LOG2E 1.4426950408889634f

static_assert(BQ % 16 == 0 && BK % 16 == 0 && HEAD_D % 16 == 0, "tiles are multiples of the mma shape");
static_assert((BK * CHUNKS) % THREADS == 0 && (BK * HEAD_D) % THREADS == 0, "tile loads split evenly");

__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to the element type, packed: lo in the low half (the lower column of a fragment pair).
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn." MMA_TYPE "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // first source -> upper half
    return r;
}

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void ldsm_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Keys j0..j0+BK-1 of one (b, h) (rows of g, gs elements apart; gd between elements) into shared rows of
// SROW halves; rows past k_len are zeros (their scores are masked, and 0 * V stays 0, never NaN).
__device__ __forceinline__ void load_tile(T* s, const T* g, long long gs, long long gd, int j0, int k_len, int tid) {
#if STRIDED
    #pragma unroll 4  // not fully: BK * HEAD_D / THREADS element loads would each hold a 64-bit address
    for (int it = 0; it < BK * HEAD_D / THREADS; ++it) {
        const int i = tid + it * THREADS, r = i / HEAD_D, c = i % HEAD_D;
        s[r * SROW + c] = (j0 + r < k_len) ? g[(long long)(j0 + r) * gs + c * gd] : (T)0;  // bits 0: +0.0
    }
#else
    const unsigned base = smem_u32(s);
    #pragma unroll
    for (int it = 0; it < BK * CHUNKS / THREADS; ++it) {
        const int i = tid + it * THREADS, r = i / CHUNKS, c = i % CHUNKS;
        const bool in = j0 + r < k_len;
        const T* src = in ? g + (long long)(j0 + r) * gs + c * 8 : g;  // src-size 0 reads nothing: zero fill
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(base + (unsigned)(r * SROW + c * 8) * 2u), "l"(src), "r"(in ? 16 : 0) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Two consecutive elements (p[0] low, p[step] high) as one fragment register.
__device__ __forceinline__ unsigned load_pair(const T* p, long long step) {
#if STRIDED
    return (unsigned)p[0] | ((unsigned)p[step] << 16);
#else
    return *(const unsigned*)p;  // step is 1 and p 4-byte aligned (rows on 16-byte boundaries, even column)
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
flash_mma(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
          int heads, int q_len, int k_len, float scale,
          long long qb, long long qh, long long qs, long long qd,
          long long kb, long long kh, long long ks, long long kd,
          long long vb, long long vh, long long vs, long long vd)
{
    __shared__ __align__(16) T Ks[BK * SROW];
    __shared__ __align__(16) T Vs[BK * SROW];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int group = lane / 4, tig = lane % 4;
    const int h = blockIdx.y, b = blockIdx.z;
    // Causal blocks further down have more keys to walk: launch those first (they finish last otherwise).
    const int qblock = CAUSAL ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int row0 = qblock * BQ;
    const int wrow = row0 + warp * 16;  // the warp's first query row
    const T* q = Q + (long long)b * qb + (long long)h * qh;
    const T* k = K + (long long)b * kb + (long long)h * kh;
    const T* v = V + (long long)b * vb + (long long)h * vh;
    const float scale_log2 = scale * LOG2E;  // scores in the exp2 domain: exp(x) = exp2(x * log2 e)

    load_tile(Ks, k, ks, kd, 0, k_len, tid);  // K[0] is in flight while Q's fragments load

    // Q's A fragments for the warp's 16 rows, all HEAD_D dims, held in registers for every key tile.
    const int r_lo = wrow + group, r_hi = r_lo + 8;
    unsigned qf[KD][4];
    {
        const T* p_lo = q + (long long)r_lo * qs + (long long)(2 * tig) * qd;
        const T* p_hi = q + (long long)r_hi * qs + (long long)(2 * tig) * qd;
        const bool in_lo = r_lo < q_len, in_hi = r_hi < q_len;
        #pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            const long long c0 = (long long)(kk * 16) * qd, c8 = (long long)(kk * 16 + 8) * qd;
            qf[kk][0] = in_lo ? load_pair(p_lo + c0, qd) : 0u;
            qf[kk][1] = in_hi ? load_pair(p_hi + c0, qd) : 0u;
            qf[kk][2] = in_lo ? load_pair(p_lo + c8, qd) : 0u;
            qf[kk][3] = in_hi ? load_pair(p_hi + c8, qd) : 0u;
        }
    }

    float o[DT][4];
    #pragma unroll
    for (int d = 0; d < DT; ++d)
        #pragma unroll
        for (int c = 0; c < 4; ++c) o[d][c] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF};  // running max of rows r_lo, r_hi (exp2 domain)
    float l[2] = {0.0f, 0.0f};        // this lane's part of the running sum (the quad's four parts add up)

    // ldmatrix row addresses (bytes from the tile start) of this lane. K (non-transposed): matrices
    // (keys +0, dims +0), (keys +0, dims +8), (keys +8, dims +0), (keys +8, dims +8): b0, b1 of two 8-key
    // tiles. V (.trans): (keys +0, dims +0), (keys +8, dims +0), (keys +0, dims +8), (keys +8, dims +8):
    // b0, b1 of two 8-dim tiles.
    const unsigned k_lane = (unsigned)((((lane >> 4) << 3) + (lane & 7)) * SROW + ((lane >> 3) & 1) * 8) * 2u;
    const unsigned v_lane = (unsigned)(((((lane >> 3) & 1) << 3) + (lane & 7)) * SROW + (lane >> 4) * 8) * 2u;
    const unsigned k_base = smem_u32(Ks) + k_lane, v_base = smem_u32(Vs) + v_lane;

    // Causal: keys past the block's (the warp's) last query are masked for all its rows: stop there.
    const int k_end = CAUSAL ? min(k_len, row0 + BQ) : k_len;
    const int warp_k_end = wrow >= q_len ? 0 : (CAUSAL ? min(k_len, wrow + 16) : k_len);
    const int tiles = (k_end + BK - 1) / BK;

    // Pipeline (one K and one V buffer): V[t] loads while S[t] is computed, K[t+1] while P V[t] is (K[0]
    // went first, above).
    for (int t = 0; t < tiles; ++t) {
        const int j0 = t * BK;
        cp_async_wait_all();
        __syncthreads();  // K[t] is in; every warp is done with V[t-1]
        load_tile(Vs, v, vs, vd, j0, k_len, tid);
        const bool active = j0 < warp_k_end;  // warp-uniform
        float s[NT][4];
        if (active) {
            #pragma unroll
            for (int j = 0; j < NT; ++j)
                #pragma unroll
                for (int c = 0; c < 4; ++c) s[j][c] = 0.0f;
            #pragma unroll
            for (int kk = 0; kk < KD; ++kk) {
                #pragma unroll
                for (int jp = 0; jp < NT / 2; ++jp) {
                    unsigned bf[4];
                    ldsm_x4(bf, k_base + (unsigned)(jp * 16 * SROW + kk * 16) * 2u);
                    mma16816(s[2 * jp], qf[kk], bf[0], bf[1]);
                    mma16816(s[2 * jp + 1], qf[kk], bf[2], bf[3]);
                }
            }
            // Scale into the exp2 domain; mask keys past k_len and (causal) past the row, where this tile can.
            const bool edge = j0 + BK > k_len || (CAUSAL && j0 + BK - 1 > wrow);
            float mx[2] = {m[0], m[1]};
            #pragma unroll
            for (int j = 0; j < NT; ++j) {
                #pragma unroll
                for (int c = 0; c < 4; ++c) {
                    float x = s[j][c] * scale_log2;
                    if (edge) {
                        const int key = j0 + j * 8 + 2 * tig + (c & 1);
                        const int row = (c < 2) ? r_lo : r_hi;
                        if (key >= k_len || (CAUSAL && key > row)) x = NEG_INF;
                    }
                    s[j][c] = x;
                    mx[c >> 1] = fmaxf(mx[c >> 1], x);
                }
            }
            float base[2], corr[2];
            #pragma unroll
            for (int i = 0; i < 2; ++i) {
                // a row's four lanes hold its columns 2tig..+1 of each tile: max over the quad
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                base[i] = mx[i] == NEG_INF ? 0.0f : mx[i];  // a row with nothing seen yet: no inf - inf
                corr[i] = exp2f(m[i] - base[i]);             // 0 on a row's first keys (m = -inf)
                m[i] = mx[i];
                l[i] *= corr[i];
            }
            #pragma unroll
            for (int j = 0; j < NT; ++j) {
                #pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float p = exp2f(s[j][c] - base[c >> 1]);  // masked: exp2(-inf) = 0
                    s[j][c] = p;
                    l[c >> 1] += p;
                }
            }
            #pragma unroll
            for (int d = 0; d < DT; ++d) {
                o[d][0] *= corr[0]; o[d][1] *= corr[0];
                o[d][2] *= corr[1]; o[d][3] *= corr[1];
            }
        }
        cp_async_wait_all();  // (nothing in flight when STRIDED: its loads are plain stores)
        __syncthreads();  // V[t] is in; every warp is done with K[t]
        if (t + 1 < tiles) load_tile(Ks, k, ks, kd, j0 + BK, k_len, tid);
        if (active) {
            #pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                // P's A fragment for keys 16kk..16kk+15: score tiles 2kk (cols 0-7) and 2kk+1 (cols 8-15).
                unsigned a[4];
                a[0] = pack2(s[2 * kk][0], s[2 * kk][1]);
                a[1] = pack2(s[2 * kk][2], s[2 * kk][3]);
                a[2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
                #pragma unroll
                for (int dp = 0; dp < DT / 2; ++dp) {
                    unsigned bf[4];
                    ldsm_x4_trans(bf, v_base + (unsigned)(kk * 16 * SROW + dp * 16) * 2u);
                    mma16816(o[2 * dp], a, bf[0], bf[1]);
                    mma16816(o[2 * dp + 1], a, bf[2], bf[3]);
                }
            }
        }
    }

    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    T* out = O + ((long long)b * heads + h) * q_len * HEAD_D;
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = i ? r_hi : r_lo;
        if (row < q_len) {
            const float inv = 1.0f / l[i];  // >= 1: the row's max key contributes exp2(0)
            T* orow = out + (long long)row * HEAD_D + 2 * tig;
            #pragma unroll
            for (int d = 0; d < DT; ++d) {
                orow[d * 8] = from_f(o[d][2 * i] * inv);
                orow[d * 8 + 1] = from_f(o[d][2 * i + 1] * inv);
            }
        }
    }
}
