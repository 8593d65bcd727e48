// Pointer chase: latency ladder and TLB sweep (same kernels; the ring's stride differs).
// Single thread; the ring is built by chase_init from a permutation of line indices.
#include "common.cuh"

// Link k of the ring sits at base + k * stride + (k * skew) % stride; link order[i] holds the
// address of link order[i+1] (the last one that of order[0]). skew = 0 for the latency ladder;
// the TLB sweep skews links across their pages (each stays in its own page) so that
// page-strided links do not all fall into the same L2 sets.
__device__ __forceinline__ u64 link_offset(u64 k, u64 stride, u64 skew) {
    return k * stride + (skew ? (k * skew) % stride : 0ull);
}

extern "C" __global__ void chase_init(u64* base, const u64* __restrict__ order, u64 n,
                                      u64 stride_bytes, u64 skew_bytes) {
    u64 gid = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = gid; i < n; i += step) {
        u64 here = link_offset(order[i], stride_bytes, skew_bytes);
        u64 next = link_offset(order[i + 1 == n ? 0 : i + 1], stride_bytes, skew_bytes);
        *(u64*)((char*)base + here) = (u64)base + next;
    }
}

// One thread: `warm` untimed links, then `n` timed ones into lat_out, inside a clock window
// (clk: see clock_window_start in common.cuh).
template <int MODE>
__device__ __forceinline__ void chase_kernel(u64 start, u32 warm, u32 n, u32 gap_ns, u32* lat_out,
                                             u64* sink, u64* clk, u64 min_window_ns) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    u64 p = chase_untimed<MODE>(start, warm);
    ClockWindow w = clock_window_start();
    p = chase_timed<MODE>(p, n, gap_ns, lat_out);
    clock_window_end(w, clk, min_window_ns);
    sink[0] = p;
}

// The host sets cudaFuncAttributePreferredSharedMemoryCarveout = 0 on the chase kernels (as
// RRZE-HPC gpu-benches gpu-latency does): the smallest shared-memory carveout that holds their
// 8 KiB of stamps, so the L1 is as large as the SM allows.

// L1-bypassing chase (ld.global.cg): L2 and HBM tiers, TLB sweep.
extern "C" __global__ void chase_cg(u64 start, u32 warm, u32 n, u32 gap_ns, u32* lat_out, u64* sink, u64* clk,
                                    u64 min_window_ns) {
    chase_kernel<1>(start, warm, n, gap_ns, lat_out, sink, clk, min_window_ns);
}

// Default-cached chase (ld.global): the L1 tier, and the ladder as gpu-benches measures it.
extern "C" __global__ void chase_ca(u64 start, u32 warm, u32 n, u32 gap_ns, u32* lat_out, u64* sink, u64* clk,
                                    u64 min_window_ns) {
    chase_kernel<2>(start, warm, n, gap_ns, lat_out, sink, clk, min_window_ns);
}

// The same timed sequence without the load: the timer's own overhead, subtracted later.
extern "C" __global__ void timer_overhead(u32 n, u32* lat_out, u64* sink) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    sink[0] = chase_timed<0>((u64)sink, n, 0u, lat_out);
}

// SM clock against the global timer: spin warm_ns first (the clock ramps up from idle under
// --clocks none), then measure over spin_ns: out = {elapsed ns, elapsed cycles, warm-up ns}.
extern "C" __global__ void sm_clock_rate(u64 warm_ns, u64 spin_ns, u64* out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    u64 w0 = global_ns();
    u64 g0 = w0;
    while (g0 - w0 < warm_ns) g0 = global_ns();
    u64 c0 = sm_clock();
    u64 g1 = g0;
    while (g1 - g0 < spin_ns) g1 = global_ns();
    u64 c1 = sm_clock();
    out[0] = g1 - g0;
    out[1] = c1 - c0;
    out[2] = g0 - w0;
}
