// Portability of the shared CUDA templates to HIP (hiprtc on AMD GPUs).
//
// The rocm target compiles the NVIDIA target's own files (arbiter/candidates/nvidia/common.cuh,
// rows_common.cuh and the *.cu kernels) with this header placed before common.cuh: there is no
// second copy of any kernel. Under NVCC/NVRTC the whole header expands to nothing.
//
// What it maps, and why:
// * __shfl_xor_sync(mask, v, o): CUDA's 32-bit mask 0xffffffffu is wrong on AMD (wavefronts are 64
//   lanes on CDNA; HIP's own *_sync variants static_assert a 64-bit mask). The templates reduce over
//   groups of 32 threads (rows_common.cuh counts 32-thread warps, gemv.cu 32 lanes a row), so the
//   shuffle is pinned to width 32: on wave64 each 32-lane half reduces on its own, which is exactly
//   the templates' "warp", and on wave32 (RDNA) it is the whole wavefront.
// * __ldg(p): a read-only-cache load on NVIDIA; AMD has no separate path, a plain load of a
//   const __restrict__ pointer is what the compiler wants (and HIP does not define it for uint4).
//
// Not mapped (and so not available on rocm until common.cuh routes them through here): the float16
// and bfloat16 conversions in common.cuh are PTX inline assembly (cvt.f32.f16, cvt.rn.bf16.f32), and
// gemm_mma.cu is PTX mma.sync. The rocm emitted candidates therefore serve float32 only.

#if defined(__HIPCC_RTC__) || defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#define ARB_HIP 1
#define __shfl_xor_sync(mask, var, lane_mask) __shfl_xor((var), (lane_mask), 32)
#define __ldg(ptr) (*(ptr))
#endif
