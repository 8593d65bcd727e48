// Loaded latency: one-thread probes on one SM while a saturator streams on the other SMs.
//
// Placement: a probe kernel is launched first, on its own stream, as a grid of 1-thread blocks;
// the first block on the target SM (target_sm, or any SM for PROBE_ANY_SM) claims
// ctl[CTL_CLAIM] and runs the probe, the others leave (the last one to leave, when no block
// claimed, sets CTL_READY and CTL_STOP so the saturator does not wait or run for nothing). The
// probe publishes its %smid in ctl[CTL_PROBE_SM] and sets ctl[CTL_READY]. The saturator,
// launched next on another stream with blocks_per_sm x sm_count blocks, has each block wait
// for CTL_READY (bounded by a timeout), and a block that finds itself on the probe's SM exits
// at once (counted in ctl[CTL_LEFT]); blocks on SMs at or above below_sm (the active-SM knob,
// 0xFFFFFFFF for all) leave too. The saturator is launched with dynamic shared memory sized by
// the planner (plan.LoadedPlan.saturator_shared_bytes) so that at most blocks_per_sm of its
// blocks fit on an SM and the probe's block still fits beside them: the probe is placed even
// when the GPU dispatches the saturator first. The probe waits for the first saturator block
// (ctl[CTL_STARTED] > 0) plus settle_ns, stamps its window (stats[ST_PROBE_*]: %globaltimer
// and clock64 at start and end, and how many saturator blocks had started), measures, then
// sets ctl[CTL_STOP]; saturator blocks poll it every SAT_POLL iterations and also stop after
// max_ns. The host keeps a loaded level only when the probe's window lies inside the
// saturator's (first block start .. first block end). Every wait is bounded, so a missing
// partner never hangs the GPU.
#include "common.cuh"

#define CTL_PROBE_SM 0
#define CTL_READY 1
#define CTL_STOP 2
#define CTL_STARTED 3
#define CTL_LEFT 4
#define CTL_CLAIM 5
#define CTL_MISSED 6
#define CTL_WORDS 8
// stats words (u64)
#define ST_BYTES 0
#define ST_SAT_FIRST_START 1
#define ST_SAT_LAST_END 2
#define ST_PROBE_START_NS 3
#define ST_PROBE_END_NS 4
#define ST_PROBE_START_CYCLES 5
#define ST_PROBE_END_CYCLES 6
#define ST_SAT_FIRST_END 7
#define ST_SAT_AT_PROBE_START 8
#define ST_WORDS 10
#define PROBE_ANY_SM 4294967295u
#define SAT_POLL 16
#define HOT_STEP 8
#define READY_TIMEOUT_NS 50000000ull

// The placement of a probe kernel; true in the one thread that runs the probe.
__device__ bool probe_begin(volatile u32* ctl, u32 target_sm, u32 wait_saturator, u64 settle_ns, u64 timeout_ns) {
    if (threadIdx.x != 0) return false;
    u32 sm = sm_id();
    bool mine = (target_sm == PROBE_ANY_SM || sm == target_sm) && atomicCAS((u32*)&ctl[CTL_CLAIM], 0u, 1u) == 0u;
    if (!mine) {
        if (atomicAdd((u32*)&ctl[CTL_MISSED], 1u) + 1u == gridDim.x) {  // nobody landed on target_sm
            ctl[CTL_STOP] = 1u;
            __threadfence();
            ctl[CTL_READY] = 1u;
            __threadfence();
        }
        return false;
    }
    ctl[CTL_PROBE_SM] = sm;
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
    return true;
}

__device__ __forceinline__ void probe_window_start(volatile u32* ctl, u64* stats) {
    stats[ST_SAT_AT_PROBE_START] = ctl[CTL_STARTED];
    stats[ST_PROBE_START_NS] = global_ns();
    stats[ST_PROBE_START_CYCLES] = sm_clock();
}

__device__ __forceinline__ void probe_window_end(volatile u32* ctl, u64* stats) {
    stats[ST_PROBE_END_CYCLES] = sm_clock();
    stats[ST_PROBE_END_NS] = global_ns();
    __threadfence();
    ctl[CTL_STOP] = 1u;
    __threadfence();
}

// (a) the miss reference: a chase over a footprint far beyond the L2, from a ring position
// the host moves on at every level (lines of one level are not in the L2 at the next).
extern "C" __global__ void loaded_chase(u64 start, u32 warm, u32 n, u32* lat_out, u64* sink, volatile u32* ctl,
                                        u64* stats, u32 target_sm, u32 wait_saturator, u64 settle_ns,
                                        u64 timeout_ns) {
    if (!probe_begin(ctl, target_sm, wait_saturator, settle_ns, timeout_ns)) return;
    u64 p = chase_untimed<1>(start, warm);
    probe_window_start(ctl, stats);
    p = chase_timed<1>(p, n, 0u, lat_out);
    probe_window_end(ctl, stats);
    sink[0] = p;
}

// (b) re-touch after a controlled interval and (c) the hot set, under the same load
// (docs/replacement-delay.md). Round r touches `lines` lines of the re-touch ring (prime,
// timed, each access's start stamp kept), waits interval_ns[r] while chasing the small hot
// ring (its accesses timed into hot_lat until hot_cap samples, then untimed: it stays hot), and
// walks the same `lines` links again from the round's first line (same lines, same order:
// timed, start stamps kept). The host takes each line's age from the two start stamps. The
// next round continues along the ring on fresh lines.
extern "C" __global__ void retouch_probe(u64 ring, u32 lines, u32 rounds, const u32* __restrict__ interval_ns,
                                         u32* prime_lat, u32* prime_start, u32* re_lat, u32* re_start, u64 hot,
                                         u32 hot_warm, u32 hot_cap, u32* hot_lat, u32* hot_count, u64* sink,
                                         volatile u32* ctl, u64* stats, u32 target_sm, u32 wait_saturator,
                                         u64 settle_ns, u64 timeout_ns) {
    if (!probe_begin(ctl, target_sm, wait_saturator, settle_ns, timeout_ns)) return;
    u64 h = chase_untimed<1>(hot, hot_warm);
    u32 hn = 0;
    u64 seg = ring;
    probe_window_start(ctl, stats);
    for (u32 r = 0; r < rounds; ++r) {
        u32 off = r * lines;
        u64 next = chase_timed_ex<1, true>(seg, lines, 0u, prime_lat + off, prime_start + off);
        u64 deadline = global_ns() + interval_ns[r];
        while (global_ns() < deadline) {
            if (hn < hot_cap) {
                u32 m = hot_cap - hn < HOT_STEP ? hot_cap - hn : HOT_STEP;
                h = chase_timed<1>(h, m, 0u, hot_lat + hn);
                hn += m;
            } else {
                h = chase_untimed<1>(h, HOT_STEP);
            }
        }
        chase_timed_ex<1, true>(seg, lines, 0u, re_lat + off, re_start + off);
        seg = next;
    }
    probe_window_end(ctl, stats);
    hot_count[0] = hn;
    sink[0] = h ^ seg;
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
        u64 end = global_ns();
        atomicAdd(&stats[ST_BYTES], iters * per_thread * blockDim.x);
        atomicMin(&stats[ST_SAT_FIRST_START], s_begin);
        atomicMax(&stats[ST_SAT_LAST_END], end);
        atomicMin(&stats[ST_SAT_FIRST_END], end);
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
