// Tiled GEMM on the CUDA cores: C[M,N] = epilogue(A[M,K] @ B[K,N]), row-major, any M, N, K.
//
// Parameters (defined before this file):
//   BM, BN   block tile of C;  BK  K-slice staged in shared memory per step
//   TM, TN   micro-tile of C per thread; the block has (BM/TM)*(BN/TN) threads
//   SPLIT_K  (optional) write float partial sums of this block's K range to `partial`
//            instead of C; a reduction kernel (splitk_reduce.cu) finishes them.
// Accumulation is in float for every element type. Tails in M, N and K are handled
// by zero-filling the shared tiles and guarding the stores.
// A thread owns rows ty + i*(BM/TM) and columns tx + j*(BN/TN): strided ownership
// keeps shared-memory reads conflict-free and global stores coalesced.

#define THREADS ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_tiled(const T* __restrict__ A, const T* __restrict__ B, TO* __restrict__ C,
           int M, int N, int K, long long lda, long long ldb, long long ldc,
           const T* __restrict__ bias, const T* __restrict__ residual, long long ldr,
           int k_per_split, float* __restrict__ partial)
{
    __shared__ float As[BK][BM + 1];  // transposed: the inner loop reads a column of A as a row
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int k_begin = blockIdx.z * k_per_split;
    const int k_end = min(K, k_begin + k_per_split);

    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int m = i / BK, k = i % BK;  // consecutive threads read consecutive k of one row
            const int gr = row0 + m, gk = k0 + k;
            As[k][m] = (gr < M && gk < k_end) ? to_f(A[gr * lda + gk]) : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int k = i / BN, n = i % BN;
            const int gk = k0 + k, gc = col0 + n;
            Bs[k][n] = (gk < k_end && gc < N) ? to_f(B[gk * ldb + gc]) : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty + i * (BM / TM)];
            #pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx + j * (BN / TN)];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty + i * (BM / TM);
        #pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tx + j * (BN / TN);
            if (r < M && c < N) {
#ifdef SPLIT_K
                partial[(long long)blockIdx.z * M * N + (long long)r * N + c] = acc[i][j];
#else
                C[r * ldc + c] = to_out(arb_epilogue(acc[i][j], r, c, bias, residual, ldr));
#endif
            }
        }
    }
}
