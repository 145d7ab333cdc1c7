// Row-kernel scaffolding shared by softmax.cu and rmsnorm.cu.
//
// Parameters (defined before this file):
//   ROW_THREADS    threads per row: 32 = warp per row, 64..1024 = block per row
//   ROWS_PER_BLOCK rows handled by one block (block = ROW_THREADS * ROWS_PER_BLOCK threads)
//   VEC            elements per load: 1, or the 16-byte vector width (caller guarantees
//                  cols % VEC == 0 and 16-byte aligned rows)
//   ITERS          loads per thread: the row is held in registers, one read of global memory
// A row reduction is a warp shuffle, plus one trip through shared memory when a row
// spans several warps (every thread reaches the barriers: inactive rows are masked,
// never returned early).

#define BLOCK (ROW_THREADS * ROWS_PER_BLOCK)
#define WARPS_PER_ROW (ROW_THREADS / 32)

__device__ __forceinline__ float row_reduce(float v, bool is_max, float* scratch) {
    v = is_max ? warp_max(v) : warp_sum(v);
#if WARPS_PER_ROW > 1
    const int row_in_block = threadIdx.x / ROW_THREADS;
    const int warp_in_row = (threadIdx.x % ROW_THREADS) / 32;
    float* mine = scratch + row_in_block * WARPS_PER_ROW;
    if (threadIdx.x % 32 == 0) mine[warp_in_row] = v;
    __syncthreads();
    v = mine[0];
    #pragma unroll
    for (int w = 1; w < WARPS_PER_ROW; ++w) v = is_max ? fmaxf(v, mine[w]) : v + mine[w];
    __syncthreads();  // scratch is reused by the next reduction
#endif
    return v;
}

// Load this thread's part of a row into v[ITERS][VEC]; positions past `cols` get `fill`.
__device__ __forceinline__ void load_row(const T* __restrict__ x, int cols, bool active, float fill,
                                         float (&v)[ITERS][VEC]) {
    const int t = threadIdx.x % ROW_THREADS;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const int base = (it * ROW_THREADS + t) * VEC;
        if (active && base < cols) {
#if VEC > 1
            unpack16(__ldg(reinterpret_cast<const uint4*>(x + base)), v[it]);
#else
            v[it][0] = to_f(x[base]);
#endif
        } else {
            #pragma unroll
            for (int e = 0; e < VEC; ++e) v[it][e] = fill;
        }
    }
}

__device__ __forceinline__ void store_row(T* __restrict__ y, int cols, bool active, float (&v)[ITERS][VEC]) {
    const int t = threadIdx.x % ROW_THREADS;
    #pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const int base = (it * ROW_THREADS + t) * VEC;
        if (active && base < cols) {
#if VEC > 1
            *reinterpret_cast<uint4*>(y + base) = pack16(v[it]);
#else
            y[base] = from_f(v[it][0]);
#endif
        }
    }
}
