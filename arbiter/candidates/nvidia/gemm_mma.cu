// Tensor-core GEMM for float16 / bfloat16: C[M,N] = epilogue(A[M,K] @ B[K,N]), row-major,
// any M, N, K; float accumulation (mma.sync.m16n8k16, sm_80 and newer).
//
// Parameters (defined before this file):
//   BM, BN   block tile of C;  BK  K-slice staged in shared memory (a multiple of 16)
//   WM, WN   warps along M and N; each warp computes a (BM/WM) x (BN/WN) tile
//   MMA_TYPE "f16" or "bf16" (the PTX operand type)
// Shared tiles: As[m][k] and Bs[n][k] (B transposed on the way in), so every fragment
// register is one 32-bit read of two consecutive k. Tails are zero-filled on load and
// guarded on store. Fragment layouts follow the PTX ISA's m16n8k16 description:
// lane = 4*group + tig; A regs (r,c) (r+8,c) (r,c+8) (r+8,c+8) with r = group,
// c = 2*tig; B regs k = 2*tig and 2*tig+8 at n = group; C (group, 2*tig..+1) and row+8.

#define THREADS (WM * WN * 32)
#define WTM (BM / WM)
#define WTN (BN / WN)
#define MT (WTM / 16)
#define NT (WTN / 8)
#define PAD 8  // halves of padding per shared row: spreads rows over banks, keeps 4-byte alignment

__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_mma(const T* __restrict__ A, const T* __restrict__ B, TO* __restrict__ C,
         int M, int N, int K, long long lda, long long ldb, long long ldc,
         const T* __restrict__ bias, const T* __restrict__ residual, long long ldr)
{
    __shared__ __align__(16) T As[BM][BK + PAD];
    __shared__ __align__(16) T Bs[BN][BK + PAD];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp / WN, warp_n = warp % WN;
    const int group = lane / 4, tig = lane % 4;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    float acc[MT][NT][4];
    #pragma unroll
    for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int j = 0; j < NT; ++j)
            #pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int m = i / BK, k = i % BK;
            const int gr = row0 + m, gk = k0 + k;
            As[m][k] = (gr < M && gk < K) ? A[gr * lda + gk] : (T)0;  // bit pattern 0 is +0.0
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int k = i / BN, n = i % BN;
            const int gk = k0 + k, gc = col0 + n;
            Bs[n][k] = (gk < K && gc < N) ? B[gk * ldb + gc] : (T)0;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MT][4], b[NT][2];
            #pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r = warp_m * WTM + i * 16 + group, c = kk + 2 * tig;
                a[i][0] = *(const unsigned*)&As[r][c];
                a[i][1] = *(const unsigned*)&As[r + 8][c];
                a[i][2] = *(const unsigned*)&As[r][c + 8];
                a[i][3] = *(const unsigned*)&As[r + 8][c + 8];
            }
            #pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int n = warp_n * WTN + j * 8 + group, k = kk + 2 * tig;
                b[j][0] = *(const unsigned*)&Bs[n][k];
                b[j][1] = *(const unsigned*)&Bs[n][k + 8];
            }
            #pragma unroll
            for (int i = 0; i < MT; ++i)
                #pragma unroll
                for (int j = 0; j < NT; ++j) mma16816(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < MT; ++i) {
        #pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int r = row0 + warp_m * WTM + i * 16 + group;
            const int c = col0 + warp_n * WTN + j * 8 + 2 * tig;
            #pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int rr = r + (q >= 2 ? 8 : 0), cc = c + (q & 1);
                if (rr < M && cc < N) C[rr * ldc + cc] = to_out(arb_epilogue(acc[i][j][q], rr, cc, bias, residual, ldr));
            }
        }
    }
}
