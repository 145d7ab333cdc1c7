// SwiGLU gate after one GEMM on the concatenated weights: Z = X @ [Wg | Wu] is [M, 2N], and
//   out[r, c] = silu(Z[r, c]) * Z[r, N + c]
// in one pass, in float, rounded once to T.

extern "C" __global__ void gated_epilogue(const T* __restrict__ Z, T* __restrict__ Out, long long M, int N)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= M * N) return;
    const long long r = idx / N;
    const int c = (int)(idx % N);
    const float gv = to_f(Z[r * 2 * N + c]);
    Out[idx] = from_f(act_silu(gv) * to_f(Z[r * 2 * N + N + c]));
}
