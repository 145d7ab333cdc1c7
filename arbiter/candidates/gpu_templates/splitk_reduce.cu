// Second pass of split-K: C[r, c] = epilogue(sum over s of partial[s, r, c]).
// One thread per element of C; the sum runs in a fixed order, so results are deterministic.

extern "C" __global__ void splitk_reduce(const float* __restrict__ partial, TO* __restrict__ C,
                                         int M, int N, int splits, long long ldc,
                                         const T* __restrict__ bias, const T* __restrict__ residual,
                                         long long ldr)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long total = (long long)M * N;
    if (i >= total) return;
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += partial[z * total + i];
    const int r = (int)(i / N), c = (int)(i % N);
    C[r * ldc + c] = to_out(arb_epilogue(s, r, c, bias, residual, ldr));
}
