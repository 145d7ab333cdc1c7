// Shared by every NVIDIA kernel template: element types and conversions, activations.
//
// Header-free on purpose (no cuda_fp16.h / cuda_bf16.h / mma.h): NVRTC then works
// wherever CuPy does, without the CUDA toolkit's include directory. Half types are
// held as their 16-bit patterns and converted with PTX cvt instructions.
//
// The including code defines exactly one of ARB_F32, ARB_F16, ARB_BF16 first.

#if defined(ARB_F32)
typedef float T;
__device__ __forceinline__ float to_f(T x) { return x; }
__device__ __forceinline__ T from_f(float x) { return x; }
#elif defined(ARB_F16)
typedef unsigned short T;
__device__ __forceinline__ float to_f(T x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}
__device__ __forceinline__ T from_f(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
#elif defined(ARB_BF16)
typedef unsigned short T;
__device__ __forceinline__ float to_f(T x) { return __uint_as_float(((unsigned int)x) << 16); }
__device__ __forceinline__ T from_f(float x) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
#else
#error "define ARB_F32, ARB_F16 or ARB_BF16 before common.cuh"
#endif

// Elements per 16-byte vector load.
#define VEC16 (16 / (int)sizeof(T))

// max that keeps a NaN from either side, as the oracle's np.maximum does (fmaxf drops it: relu(NaN) would be 0).
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }

// Activations of the matmul epilogue, in float.
__device__ __forceinline__ float act_relu(float v) { return nan_max(v, 0.0f); }
__device__ __forceinline__ float act_gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }
__device__ __forceinline__ float act_gelu_tanh(float v) {
    return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
}
__device__ __forceinline__ float act_silu(float v) { return v / (1.0f + expf(-v)); }

// Warp-wide reductions.
__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// 16-byte vectors of VEC16 elements, unpacked to and packed from float.
__device__ __forceinline__ void unpack16(uint4 q, float* out) {
#if defined(ARB_F32)
    out[0] = __uint_as_float(q.x); out[1] = __uint_as_float(q.y);
    out[2] = __uint_as_float(q.z); out[3] = __uint_as_float(q.w);
#else
    unsigned int w[4] = {q.x, q.y, q.z, q.w};
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = to_f((T)(w[i] & 0xffffu));
        out[2 * i + 1] = to_f((T)(w[i] >> 16));
    }
#endif
}
__device__ __forceinline__ uint4 pack16(const float* in) {
#if defined(ARB_F32)
    return make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]), __float_as_uint(in[3]));
#else
    unsigned int w[4];
    #pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (unsigned int)from_f(in[2 * i]) | ((unsigned int)from_f(in[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
#endif
}

#define NEG_INF __int_as_float(0xff800000)  // -infinity without math.h

// Output type of the GEMM kernels: T, or float when the caller composes an epilogue afterwards
// (ARB_OUT_F32), so a half-precision product is rounded once, after the epilogue, not twice.
#ifdef ARB_OUT_F32
typedef float TO;
__device__ __forceinline__ TO to_out(float x) { return x; }
#else
typedef T TO;
__device__ __forceinline__ TO to_out(float x) { return from_f(x); }
#endif
