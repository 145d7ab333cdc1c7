// SwiGLU gated projection: out[M,N] = silu(X @ Wg) * (X @ Wu), row-major, any M, N, K.
//
// Both GEMMs in one kernel on the CUDA cores. A block stages one K-slice of X once and
// the matching slices of Wg and Wu beside it, keeps two float accumulators per output, and applies
// silu(g) * u in registers before the one rounding to T: neither product ever reaches memory.
//   BM, BN   block tile of out;  BK  K-slice staged in shared memory per step
//   TM, TN   micro-tile per thread; the block has (BM/TM)*(BN/TN) threads
// Tails in M, N and K are zero-filled in shared memory and guarded at the store; strided ownership
// (as gemm_tiled.cu) keeps shared reads conflict-free and stores coalesced.

#define THREADS ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(THREADS)
gated_tiled(const T* __restrict__ X, const T* __restrict__ Wg, const T* __restrict__ Wu, T* __restrict__ Out,
            int M, int N, int K)
{
    __shared__ float Xs[BK][BM + 1];  // transposed: the inner loop reads a column of X as a row
    __shared__ float Gs[BK][BN];
    __shared__ float Us[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    float g[TM][TN], u[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) g[i][j] = u[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int m = i / BK, k = i % BK;
            const int gr = row0 + m, gk = k0 + k;
            Xs[k][m] = (gr < M && gk < K) ? to_f(X[(long long)gr * K + gk]) : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int k = i / BN, n = i % BN;
            const int gk = k0 + k, gc = col0 + n;
            const bool in = gk < K && gc < N;
            Gs[k][n] = in ? to_f(Wg[(long long)gk * N + gc]) : 0.0f;
            Us[k][n] = in ? to_f(Wu[(long long)gk * N + gc]) : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], bg[TN], bu[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = Xs[k][ty + i * (BM / TM)];
            #pragma unroll
            for (int j = 0; j < TN; ++j) {
                bg[j] = Gs[k][tx + j * (BN / TN)];
                bu[j] = Us[k][tx + j * (BN / TN)];
            }
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) {
                    g[i][j] = fmaf(a[i], bg[j], g[i][j]);
                    u[i][j] = fmaf(a[i], bu[j], u[i][j]);
                }
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty + i * (BM / TM);
        #pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tx + j * (BN / TN);
            if (r < M && c < N) Out[(long long)r * N + c] = from_f(act_silu(g[i][j]) * u[i][j]);
        }
    }
}
