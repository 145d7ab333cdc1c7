// Tensor-core GEMM for float16 / bfloat16: C[M,N] = epilogue(A[M,K] @ B[K,N]), row-major A and B,
// any M, N, K; float accumulation. mma.sync.m16n8k16 fed by ldmatrix from a multi-stage shared-memory
// ring that cp.async fills (sm_80 and newer).
//
// Parameters (defined before this file):
//   BM, BN    block tile of C;  BK  K-slice per pipeline stage (a multiple of 16)
//   WM, WN    warps along M and N; each warp computes a (BM/WM) x (BN/WN) tile (a multiple of 16 x 16)
//   STAGES    depth of the shared-memory ring (>= 2): STAGES-1 K-slices are in flight while one is computed
//   MMA_TYPE  "f16" or "bf16" (the PTX operand type)
//   CP_ASYNC  1: every slice is copied by 16-byte cp.async.cg, asynchronously; needs K % 8 == 0, N % 8 == 0
//             and A, B, C 16-byte aligned (the caller checks). Tails are zero-filled by the src-size form.
//             0: bounds-checked element loads, stored to the same shared layout: any shape, any alignment.
// Shared memory is dynamic (STAGES * STAGE_BYTES, the launch passes it and raises the kernel's limit):
// per stage As[BM][BK + PAD] then Bs[BK][BN + PAD], both row-major as in global memory. The PAD of 8
// elements (16 bytes) makes consecutive rows start 16 bytes apart modulo 128, so the 8 row addresses of
// one ldmatrix 8x8 matrix fall in 8 distinct 16-byte bank groups (no conflicts), and every row stays
// 16-byte aligned for cp.async and ldmatrix.
// Fragments follow the PTX ISA's m16n8k16 layout (lane = 4*group + tig): A regs (r,c) (r+8,c) (r,c+8)
// (r+8,c+8) with r = group, c = 2*tig, from one ldmatrix.x4 (lanes 0-15 address rows 0-15 at k 0,
// lanes 16-31 rows 0-15 at k 8); B regs k = 2*tig..+1 and 2*tig+8..+9 at n = group, from
// ldmatrix.x4.trans over Bs rows (lanes 0-15 address k rows 0-15 at n 0, lanes 16-31 the same k rows at
// n 8: two n8 tiles per instruction); C (group, 2*tig..+1) and row + 8.
// Blocks are numbered in groups of GROUP_M tile rows (all of their tile columns), so the blocks resident at
// once share A panels and B panels in L2.

#define THREADS (WM * WN * 32)
#define WTM (BM / WM)
#define WTN (BN / WN)
#define MT (WTM / 16)
#define NT (WTN / 8)
#define PAD 8
#define AS_LD (BK + PAD)  // elements per shared row of A
#define BS_LD (BN + PAD)  // elements per shared row of B
#define A_STAGE (BM * AS_LD)  // elements per stage
#define B_STAGE (BK * BS_LD)
#define A_CHUNKS (BM * BK / 8)  // 16-byte chunks per slice
#define B_CHUNKS (BK * BN / 8)
#define GROUP_M 8
// Two blocks an SM for warp tiles up to 64x32 (at most 128 registers a thread for 256 threads): one block's
// barrier wait is the other's compute. A 64x64 warp tile needs ~220 registers: one block of 8 warps an SM.
#define MIN_BLOCKS (WTM * WTN <= 64 * 32 ? 2 : 1)

static_assert(BK % 16 == 0, "BK must be a multiple of 16");
static_assert(WTM % 16 == 0 && WTN % 16 == 0, "a warp tile is a multiple of 16 x 16 (B fragments come in pairs)");
static_assert(STAGES >= 2, "the ring needs at least two stages");

__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 b16 matrices; lanes 8j..8j+7 give the row addresses of matrix j, register j receives it.
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// The same, each matrix transposed: a thread receives two consecutive rows of one column.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* lo, unsigned* hi, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(lo[0]), "=r"(lo[1]), "=r"(hi[0]), "=r"(hi[1]) : "r"(addr) : "memory");
}

#if CP_ASYNC
// 16 bytes global -> shared, bypassing L1; src_bytes 0 reads nothing and writes 16 zero bytes.
__device__ __forceinline__ void cp_async16(unsigned dst, const T* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N_PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N_PENDING) : "memory"); }
#else
// Element loads complete before the thread's shared store: nothing is in flight.
__device__ __forceinline__ void cp_async_commit() {}
template <int N_PENDING>
__device__ __forceinline__ void cp_async_wait() {}

// The first `valid` of eight elements at `p` (zeros after them) packed as the 16 bytes of one shared chunk.
__device__ __forceinline__ uint4 load8(const T* p, int valid) {
    unsigned w[4];
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const unsigned lo = 2 * i < valid ? (unsigned)p[2 * i] : 0u;  // bit pattern 0 is +0.0
        const unsigned hi = 2 * i + 1 < valid ? (unsigned)p[2 * i + 1] : 0u;
        w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}
#endif

// Two adjacent outputs (column c even, the row 4- or 8-byte aligned: the CP_ASYNC path's conditions).
__device__ __forceinline__ void store2(TO* p, TO x, TO y) {
#ifdef ARB_OUT_F32
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
#else
    *reinterpret_cast<unsigned*>(p) = (unsigned)x | ((unsigned)y << 16);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
gemm_mma(const T* __restrict__ A, const T* __restrict__ B, TO* __restrict__ C,
         int M, int N, int K, long long lda, long long ldb, long long ldc,
         const T* __restrict__ bias, const T* __restrict__ residual, long long ldr)
{
    extern __shared__ __align__(16) unsigned char arb_smem[];
    T* const As = reinterpret_cast<T*>(arb_smem);
    T* const Bs = As + STAGES * A_STAGE;
    const unsigned as_addr = (unsigned)__cvta_generic_to_shared(As);
    const unsigned bs_addr = (unsigned)__cvta_generic_to_shared(Bs);

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp / WN, warp_n = warp % WN;
    const int group = lane / 4, tig = lane % 4;

    // Grouped block order: GROUP_M tile rows at a time, column by column within the group.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (int)(blockIdx.x / per_group) * GROUP_M;
    const int rows_here = min(tiles_m - first_m, GROUP_M);
    const int in_group = (int)(blockIdx.x % per_group);
    const int row0 = (first_m + in_group % rows_here) * BM, col0 = (in_group / rows_here) * BN;

    // Copy K-slice `kt` into ring slot `stage`: A as BM rows of BK/8 chunks, B as BK rows of BN/8 chunks,
    // consecutive threads on consecutive chunks of a row (coalesced).
    auto load_stage = [&](int stage, int kt) {
        const int k0 = kt * BK;
        #pragma unroll
        for (int t = 0; t < (A_CHUNKS + THREADS - 1) / THREADS; ++t) {
            const int c = tid + t * THREADS;
            if (A_CHUNKS % THREADS != 0 && c >= A_CHUNKS) break;
            const int r = c / (BK / 8), kc = (c % (BK / 8)) * 8;
            const int gr = row0 + r, gk = k0 + kc;
            const int off = stage * A_STAGE + r * AS_LD + kc;
#if CP_ASYNC
            const bool valid = gr < M && gk < K;  // K % 8 == 0: a chunk is wholly in or out
            cp_async16(as_addr + off * 2, valid ? A + gr * lda + gk : A, valid);
#else
            const int n_valid = gr < M ? min(8, K - gk) : 0;
            *reinterpret_cast<uint4*>(As + off) = load8(A + (n_valid > 0 ? gr * lda + gk : 0), n_valid);
#endif
        }
        #pragma unroll
        for (int t = 0; t < (B_CHUNKS + THREADS - 1) / THREADS; ++t) {
            const int c = tid + t * THREADS;
            if (B_CHUNKS % THREADS != 0 && c >= B_CHUNKS) break;
            const int r = c / (BN / 8), nc = (c % (BN / 8)) * 8;
            const int gk = k0 + r, gc = col0 + nc;
            const int off = stage * B_STAGE + r * BS_LD + nc;
#if CP_ASYNC
            const bool valid = gk < K && gc < N;  // N % 8 == 0
            cp_async16(bs_addr + off * 2, valid ? B + gk * ldb + gc : B, valid);
#else
            const int n_valid = gk < K ? min(8, N - gc) : 0;
            *reinterpret_cast<uint4*>(Bs + off) = load8(B + (n_valid > 0 ? gk * ldb + gc : 0), n_valid);
#endif
        }
    };

    float acc[MT][NT][4];
    #pragma unroll
    for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int j = 0; j < NT; ++j)
            #pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    // This lane's ldmatrix row address within a stage (bytes), see the fragment notes above.
    const unsigned a_lane = (unsigned)(((warp_m * WTM + (lane & 15)) * AS_LD + (lane >> 4) * 8) * 2);
    const unsigned b_lane = (unsigned)(((lane & 15) * BS_LD + warp_n * WTN + (lane >> 4) * 8) * 2);

    const int k_tiles = (K + BK - 1) / BK;
    // Prologue: the first STAGES-1 slices in flight, one commit group each (empty past the end, so the
    // group count stays in step with the slice index).
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }
    int read = 0, write = STAGES - 1;  // ring slots of slice kt and of slice kt + STAGES - 1
    for (int kt = 0; kt < k_tiles; ++kt) {
        // Slice kt's group is complete when at most STAGES-2 newer groups are pending; the barrier makes
        // every thread's copies visible and tells that slot `write` (read in iteration kt-1) is free.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < k_tiles) load_stage(write, kt + STAGES - 1);
        cp_async_commit();

        const unsigned a_stage = as_addr + read * (A_STAGE * 2) + a_lane;
        const unsigned b_stage = bs_addr + read * (B_STAGE * 2) + b_lane;
        #pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MT][4], b[NT][2];
            #pragma unroll
            for (int i = 0; i < MT; ++i) ldmatrix_x4(a[i], a_stage + (i * 16 * AS_LD + kk) * 2);
            #pragma unroll
            for (int j = 0; j < NT; j += 2) ldmatrix_x4_trans(b[j], b[j + 1], b_stage + (kk * BS_LD + j * 8) * 2);
            #pragma unroll
            for (int i = 0; i < MT; ++i)
                #pragma unroll
                for (int j = 0; j < NT; ++j) mma16816(acc[i][j], a[i], b[j]);
        }
        read = read == STAGES - 1 ? 0 : read + 1;
        write = write == STAGES - 1 ? 0 : write + 1;
    }
    cp_async_wait<0>();  // nothing real is pending (only empty groups); leave no copy behind the exit

    #pragma unroll
    for (int i = 0; i < MT; ++i) {
        #pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int r = row0 + warp_m * WTM + i * 16 + group;
            const int c = col0 + warp_n * WTN + j * 8 + 2 * tig;
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int rr = r + 8 * h;
                if (rr >= M || c >= N) continue;
                const float v0 = arb_epilogue(acc[i][j][2 * h], rr, c, bias, residual, ldr);
#if CP_ASYNC
                // N % 8 == 0 and c even: c + 1 < N too, and the pair is aligned
                store2(C + rr * ldc + c, to_out(v0), to_out(arb_epilogue(acc[i][j][2 * h + 1], rr, c + 1, bias,
                                                                          residual, ldr)));
#else
                C[rr * ldc + c] = to_out(v0);
                if (c + 1 < N) C[rr * ldc + c + 1] = to_out(arb_epilogue(acc[i][j][2 * h + 1], rr, c + 1, bias,
                                                                           residual, ldr));
#endif
            }
        }
    }
}
