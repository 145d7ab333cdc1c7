// Stockham radix-2 FFT over rows of power-of-two length N (autosort: no bit-reversal pass).
//
// Stage ns = 1, 2, 4, ..., N/2 combines pairs of length-ns sub-transforms; butterfly j (0 <= j < N/2):
//   k = j mod ns,  a = in[j],  b = in[j + N/2] * exp(SIGN * i * pi * k / ns)
//   out[(j - k) * 2 + k] = a + b,  out[(j - k) * 2 + k + ns] = a - b
// (Govindaraju et al., "High performance discrete Fourier transforms on graphics processors", SC08).
// Twiddles come from sincospi of the exact ratio k / ns, so each is correct to one rounding.
//
// Parameters (defined before this file):
//   N         the transform length (a power of two);  LOG2N its log2
//   FFT_F64   1: complex128 / float64, else complex64 / float32
//   KIND      0 c2c, 1 r2c (real rows in, N/2+1 bins out), 2 c2r (N/2+1 bins in, real rows out)
//   INVERSE   1: sign +, and the result is scaled by 1/N (NumPy's "backward" normalisation)
//   THREADS   threads a block (the shared-memory kernel)
//   USE_SMEM  1: compile fft_smem; 0: compile the global-memory path
// Two paths: fft_smem keeps one row in shared memory for every stage (one launch); for rows too long
// for it, fft_load -> fft_stage (one launch per stage, ping-pong between two global buffers) -> fft_store.

#if FFT_F64
typedef double R;
typedef double2 C;
__device__ __forceinline__ void sincos_pi(R x, R* s, R* c) { sincospi(x, s, c); }
#else
typedef float R;
typedef float2 C;
__device__ __forceinline__ void sincos_pi(R x, R* s, R* c) { sincospif(x, s, c); }
#endif

#define HALF (N > 1 ? N / 2 : 1)  // N = 1 has no stage; 1 keeps the unused index arithmetic defined
#define SIGN (INVERSE ? (R)1 : (R)-1)
#if KIND == 1
#define OUT_LEN (N / 2 + 1)
#else
#define OUT_LEN N
#endif

__device__ __forceinline__ C cmake(R x, R y) { C v; v.x = x; v.y = y; return v; }

// Element i of row `row` of the transform's complex input, from the region's x.
__device__ __forceinline__ C load_elem(const void* X, long long row, long long ldx, int i) {
#if KIND == 0
    return ((const C*)X)[row * ldx + i];
#elif KIND == 1
    return cmake(((const R*)X)[row * ldx + i], (R)0);
#else
    // c2r: the full Hermitian spectrum from the half one; the zero and Nyquist bins' imaginary parts
    // are ignored (numpy.fft.irfft's convention).
    const C* x = (const C*)X + row * ldx;
    if (i == 0 || 2 * i == N) return cmake(x[i].x, (R)0);
    if (2 * i < N) return x[i];
    const C h = x[N - i];
    return cmake(h.x, -h.y);
#endif
}

// Output element i (< OUT_LEN) of row `row` into the region's output.
__device__ __forceinline__ void store_elem(void* Y, long long row, long long ldy, int i, C v) {
#if INVERSE
    const R inv = (R)1 / (R)N;
    v.x *= inv; v.y *= inv;
#endif
#if KIND == 2
    ((R*)Y)[row * ldy + i] = v.x;
#else
    ((C*)Y)[row * ldy + i] = v;
#endif
}

__device__ __forceinline__ void butterfly(const C* __restrict__ in, C* __restrict__ out, int j, int ns) {
    const C a = in[j], b = in[j + HALF];
    const int k = j & (ns - 1);
    R s, c;
    sincos_pi(SIGN * (R)k / (R)ns, &s, &c);
    const C bw = cmake(b.x * c - b.y * s, b.x * s + b.y * c);
    const int o = ((j - k) << 1) + k;
    out[o] = cmake(a.x + bw.x, a.y + bw.y);
    out[o + ns] = cmake(a.x - bw.x, a.y - bw.y);
}

#if USE_SMEM  // one module per path: a long row's static shared buffer would not compile
extern "C" __global__ void __launch_bounds__(THREADS)
fft_smem(const void* __restrict__ X, void* __restrict__ Y, long long ldx, long long ldy)
{
    __shared__ C buf[2][N];
    const long long row = blockIdx.x;
    for (int i = threadIdx.x; i < N; i += THREADS) buf[0][i] = load_elem(X, row, ldx, i);
    __syncthreads();
    int src = 0;
    #pragma unroll 1
    for (int ns = 1; ns < N; ns <<= 1) {
        for (int j = threadIdx.x; j < HALF; j += THREADS) butterfly(buf[src], buf[src ^ 1], j, ns);
        __syncthreads();
        src ^= 1;
    }
    for (int i = threadIdx.x; i < OUT_LEN; i += THREADS) store_elem(Y, row, ldy, i, buf[src][i]);
}

#else
extern "C" __global__ void fft_load(const void* __restrict__ X, C* __restrict__ buf, long long batch, long long ldx)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < batch * N) buf[idx] = load_elem(X, idx / N, ldx, (int)(idx % N));
}

extern "C" __global__ void fft_stage(const C* __restrict__ in, C* __restrict__ out, long long batch, int ns)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= batch * HALF) return;
    const long long row = idx / HALF;
    butterfly(in + row * N, out + row * N, (int)(idx % HALF), ns);
}

extern "C" __global__ void fft_store(const C* __restrict__ buf, void* __restrict__ Y, long long batch, long long ldy)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < batch * OUT_LEN) {
        const long long row = idx / OUT_LEN;
        const int i = (int)(idx % OUT_LEN);
        store_elem(Y, row, ldy, i, buf[row * N + i]);
    }
}
#endif
