// Streaming bandwidth: read, write and copy over 16-byte vectors.
// Intensity knobs: active SMs (blocks on an SM whose %smid >= active_sms leave at once, so
// exactly the SMs asked for work), blocks per SM (grid = SMs x blocks per SM), and sleep_ns per
// step. The blocks that stay claim the buffer in chunks of CLAIM_STEPS block-wide steps from an
// atomic counter (`work`, zeroed before each launch), so every vector is covered `reps` times
// however many blocks stay; inside a chunk each step is block-stride and coalesced.
// n_vec must be a multiple of blockDim.x * STREAM_UNROLL * CLAIM_STEPS (the planner sees to it).
// smids[blockIdx.x] = the SM a working block ran on, 0xFFFFFFFF for a block that left.
#include "common.cuh"

#define CLAIM_STEPS 16
// __launch_bounds__(1024, 2) on the kernels: at most 32 registers, so 2048 threads fit an SM
// (blocks_per_sm x threads up to the full SM, as the planner allows).

template <int MODE>
__device__ __forceinline__ void stream_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                              u64 n_vec, u32 reps, u32 sleep_ns, u32 active_sms,
                                              u32* smids, u64* work, u64* sink) {
    __shared__ u64 s_claim;
    u32 sm = sm_id();
    if (threadIdx.x == 0) smids[blockIdx.x] = sm < active_sms ? sm : 0xFFFFFFFFu;
    if (sm >= active_sms) return;  // the whole block: one SM
    u32 step = blockDim.x * STREAM_UNROLL;
    u64 chunk = (u64)step * CLAIM_STEPS;
    u64 chunks = n_vec / chunk;
    u64 total = chunks * reps;
    uint4 acc = make_uint4(0u, 0u, 0u, 0u);
    for (;;) {
        if (threadIdx.x == 0) s_claim = atomicAdd(work, 1ull);
        __syncthreads();
        u64 c = s_claim;
        __syncthreads();
        if (c >= total) break;
        u64 first = (c % chunks) * chunk + threadIdx.x;
        const uint4* s = src + first;
        uint4* d = dst + first;
#pragma unroll 1
        for (u32 k = 0; k < CLAIM_STEPS; ++k) {  // not unrolled across steps
            stream_step<MODE>(s + k * step, d + k * step, blockDim.x, acc);
            if (sleep_ns) __nanosleep(sleep_ns);
        }
    }
    if (MODE == 0) keep_alive(acc, sink);
}

extern "C" __global__ void __launch_bounds__(1024, 2) bw_read(const uint4* __restrict__ src, u64 n_vec, u32 reps, u32 sleep_ns,
                                   u32 active_sms, u32* smids, u64* work, u64* sink) {
    stream_kernel<0>(src, (uint4*)0, n_vec, reps, sleep_ns, active_sms, smids, work, sink);
}

extern "C" __global__ void __launch_bounds__(1024, 2) bw_write(uint4* __restrict__ dst, u64 n_vec, u32 reps, u32 sleep_ns,
                                    u32 active_sms, u32* smids, u64* work) {
    stream_kernel<1>((const uint4*)0, dst, n_vec, reps, sleep_ns, active_sms, smids, work, (u64*)0);
}

extern "C" __global__ void __launch_bounds__(1024, 2) bw_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n_vec,
                                   u32 reps, u32 sleep_ns, u32 active_sms, u32* smids, u64* work) {
    stream_kernel<2>(src, dst, n_vec, reps, sleep_ns, active_sms, smids, work, (u64*)0);
}

// Fills n_words 64-bit words with splitmix64(seed + index): the bandwidth and saturator
// buffers hold random data, not zeros (nothing downstream can shortcut a buffer of zeros, and
// the read kernels' XOR stays data dependent).
extern "C" __global__ void fill_random(u64* __restrict__ buf, u64 n_words, u64 seed) {
    u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n_words; i += step) {
        u64 z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        buf[i] = z ^ (z >> 31);
    }
}
