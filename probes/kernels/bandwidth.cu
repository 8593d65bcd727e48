// Streaming bandwidth: read, write and copy over 16-byte vectors, grid-stride.
// Intensity knobs: grid size (active SMs x blocks per SM), and sleep_ns per iteration.
// n_vec must be a multiple of gridDim.x * blockDim.x * STREAM_UNROLL (the planner sees to it).
// Each block records the SM it ran on in smids[blockIdx.x] (how many SMs were really used).
#include "common.cuh"

template <int MODE>
__device__ __forceinline__ void stream_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                              u64 n_vec, u32 reps, u32 sleep_ns, u32* smids,
                                              u64* sink) {
    if (threadIdx.x == 0) smids[blockIdx.x] = sm_id();
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 gid = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    uint4 acc = make_uint4(0u, 0u, 0u, 0u);
    for (u32 r = 0; r < reps; ++r) {
        for (u64 base = gid; base < n_vec; base += STREAM_UNROLL * stride) {
            stream_step<MODE>(src, dst, base, stride, acc);
            if (sleep_ns) __nanosleep(sleep_ns);
        }
    }
    if (MODE == 0) keep_alive(acc, sink);
}

extern "C" __global__ void bw_read(const uint4* __restrict__ src, u64 n_vec, u32 reps,
                                   u32 sleep_ns, u32* smids, u64* sink) {
    stream_kernel<0>(src, (uint4*)0, n_vec, reps, sleep_ns, smids, sink);
}

extern "C" __global__ void bw_write(uint4* __restrict__ dst, u64 n_vec, u32 reps, u32 sleep_ns,
                                    u32* smids) {
    stream_kernel<1>((const uint4*)0, dst, n_vec, reps, sleep_ns, smids, (u64*)0);
}

extern "C" __global__ void bw_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                   u64 n_vec, u32 reps, u32 sleep_ns, u32* smids) {
    stream_kernel<2>(src, dst, n_vec, reps, sleep_ns, smids, (u64*)0);
}
