// Loaded latency: a one-thread chase on one SM while a saturator streams on the other SMs.
//
// Placement (no SM is chosen in advance): the probe kernel is launched first, on its own
// stream; its single thread publishes its %smid in ctl[CTL_PROBE_SM] and sets ctl[CTL_READY].
// The saturator, launched next on another stream with blocks_per_sm x sm_count blocks, has
// each block wait for CTL_READY (bounded by a timeout), and a block that finds itself on the
// probe's SM exits at once (counted in ctl[CTL_LEFT]), so that SM runs the probe alone; blocks
// on SMs at or above below_sm (the active-SM knob, 0xFFFFFFFF for all) leave too. The
// probe waits for the first saturator block (ctl[CTL_STARTED] > 0) plus settle_ns, measures,
// then sets ctl[CTL_STOP]; saturator blocks poll it every SAT_POLL iterations and also stop
// after max_ns. Every wait is bounded, so a missing partner never hangs the GPU. The planner
// gives the saturator 3 blocks of 512 threads per SM, leaving room for the probe's block on
// any SM: the probe is placed even when the GPU dispatches the saturator first.
#include "common.cuh"

#define CTL_PROBE_SM 0
#define CTL_READY 1
#define CTL_STOP 2
#define CTL_STARTED 3
#define CTL_LEFT 4
// stats: [0] saturator bytes, [1] first saturator start ns, [2] last saturator end ns,
//        [3] probe timed-window start ns, [4] probe timed-window end ns
#define SAT_POLL 16
#define READY_TIMEOUT_NS 50000000ull

extern "C" __global__ void loaded_chase(u64 start, u32 warm, u32 n, u32 gap_ns, u32* lat_out,
                                        u64* sink, volatile u32* ctl, u64* stats,
                                        u32 wait_saturator, u64 settle_ns, u64 timeout_ns) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    ctl[CTL_PROBE_SM] = sm_id();
    __threadfence();
    ctl[CTL_READY] = 1u;
    __threadfence();
    if (wait_saturator) {
        u64 t0 = global_ns();
        while (ctl[CTL_STARTED] == 0u && global_ns() - t0 < timeout_ns) {
        }
        u64 t1 = global_ns();
        while (global_ns() - t1 < settle_ns) {
        }
    }
    u64 p = chase_untimed<1>(start, warm);
    stats[3] = global_ns();
    p = chase_timed<1>(p, n, gap_ns, lat_out);
    stats[4] = global_ns();
    __threadfence();
    ctl[CTL_STOP] = 1u;
    __threadfence();
    sink[0] = p;
}

template <int MODE>
__device__ void saturate(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n_vec,
                         u32 sleep_ns, u32 below_sm, volatile u32* ctl, u64* stats, u64 max_ns,
                         u64* sink) {
    __shared__ u32 s_flag;
    __shared__ u64 s_begin;
    if (threadIdx.x == 0) {
        u64 t0 = global_ns();
        while (ctl[CTL_READY] == 0u && global_ns() - t0 < READY_TIMEOUT_NS) {
        }
        // Pairs with the probe's fence between publishing its SM and setting READY
        // (message passing): without it the SM id read below may be older than READY.
        __threadfence();
        u32 sm = sm_id();
        u32 leave = sm == ctl[CTL_PROBE_SM];
        if (leave || sm < below_sm) atomicAdd((u32*)&ctl[leave ? CTL_LEFT : CTL_STARTED], 1u);
        s_flag = leave || sm >= below_sm;
        s_begin = global_ns();
    }
    __syncthreads();
    if (s_flag) return;
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 base = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    uint4 acc = make_uint4(0u, 0u, 0u, 0u);
    u64 iters = 0;
    for (;; ++iters) {
        if ((iters % SAT_POLL) == 0) {
            if (threadIdx.x == 0)
                s_flag = (ctl[CTL_STOP] != 0u) || (global_ns() - s_begin > max_ns);
            __syncthreads();
            u32 stop = s_flag;
            __syncthreads();
            if (stop) break;
        }
        stream_step<MODE>(src + base, dst + base, (u32)stride, acc);
        base += STREAM_UNROLL * stride;
        if (base >= n_vec) base -= n_vec;
        if (sleep_ns) __nanosleep(sleep_ns);
    }
    if (MODE == 0) keep_alive(acc, sink);
    if (threadIdx.x == 0) {
        u64 per_thread = STREAM_UNROLL * sizeof(uint4) * (MODE == 2 ? 2ull : 1ull);
        atomicAdd(&stats[0], iters * per_thread * blockDim.x);
        atomicMin(&stats[1], s_begin);
        atomicMax(&stats[2], global_ns());
    }
}

extern "C" __global__ void saturator_read(const uint4* __restrict__ src, u64 n_vec, u32 sleep_ns,
                                          u32 below_sm, volatile u32* ctl, u64* stats, u64 max_ns,
                                          u64* sink) {
    saturate<0>(src, (uint4*)0, n_vec, sleep_ns, below_sm, ctl, stats, max_ns, sink);
}

extern "C" __global__ void saturator_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                          u64 n_vec, u32 sleep_ns, u32 below_sm, volatile u32* ctl,
                                          u64* stats, u64 max_ns) {
    saturate<2>(src, dst, n_vec, sleep_ns, below_sm, ctl, stats, max_ns, (u64*)0);
}
