// Shared device helpers for the sitsprof probes. Header-only, no host includes, so the same
// text compiles with nvcc and with NVRTC (probes/kernels.py inlines it for NVRTC).
#pragma once

typedef unsigned long long u64;
typedef unsigned int u32;

// SM cycle counter: SASS `CS2R Rx, SR_CLOCKLO`.
__device__ __forceinline__ u64 sm_clock() {
    u64 t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory");
    return t;
}

// Global nanosecond timer (coarse ticks); used for spins, timeouts and bandwidth windows.
__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
    return t;
}

__device__ __forceinline__ u32 sm_id() {
    u32 r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

// L1-bypassing load: cached at L2 only (SASS `LDG.E.64.STRONG.GPU`).
__device__ __forceinline__ u64 load_cg(u64 addr) {
    u64 v;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
    return v;
}

// Default-cached load: `ld.global` with no cache operator, cached at all levels, L1
// included (SASS plain `LDG.E.64`). Spelling `.ca` out makes ptxas emit LDG.E.64.STRONG.SM.
__device__ __forceinline__ u64 load_ca(u64 addr) {
    u64 v;
    asm volatile("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
    return v;
}

// Loads per timed chunk kept in shared memory before they are flushed to global memory.
#define CHASE_CHUNK 1024

// MODE 0: no load (timer overhead), 1: ld.global.cg, 2: ld.global (default caching).
template <int MODE>
__device__ __forceinline__ u64 chase_step(u64 p) {
    if (MODE == 1) return load_cg(p);
    if (MODE == 2) return load_ca(p);
    return p;
}

// One thread walks `n` links of the ring starting at `p`, without timing.
template <int MODE>
__device__ __forceinline__ u64 chase_untimed(u64 p, u32 n) {
    for (u32 i = 0; i < n; ++i) p = chase_step<MODE>(p);
    return p;
}

// One thread walks `n` links and records each access's latency in SM cycles into lat_out.
// The next address is the loaded value, so the chase serializes. The loaded value is stored
// to shared memory before the second clock read: the store waits for the load, so that
// clock read cannot issue before the load completes. Both raw stamps go to shared memory
// (subtracted at the flush): that keeps both reads as `CS2R.32 Rx, SR_CLOCKLO` (a stamp used
// only in arithmetic is read with S2UR into a uniform register instead).
// gap_ns > 0 sleeps between accesses, outside the timed window. STARTS: also write each
// access's first stamp (low 32 bits of clock64) to start_out, so the host can take the time
// between two touches of one line (the re-touch probe's line ages).
template <int MODE, bool STARTS>
__device__ u64 chase_timed_ex(u64 p, u32 n, u32 gap_ns, u32* __restrict__ lat_out, u32* __restrict__ start_out) {
    __shared__ u32 stamp_s[2 * CHASE_CHUNK];
    __shared__ volatile u32 sink_s[1];
    for (u32 base = 0; base < n; base += CHASE_CHUNK) {
        u32 m = n - base < CHASE_CHUNK ? n - base : CHASE_CHUNK;
        for (u32 i = 0; i < m; ++i) {
            u32 t0 = (u32)clock64();
            p = chase_step<MODE>(p);
            sink_s[0] = (u32)p;
            u32 t1 = (u32)clock64();
            stamp_s[2 * i] = t0;
            stamp_s[2 * i + 1] = t1;
            if (gap_ns) __nanosleep(gap_ns);
        }
        for (u32 i = 0; i < m; ++i) {
            lat_out[base + i] = stamp_s[2 * i + 1] - stamp_s[2 * i];
            if (STARTS) start_out[base + i] = stamp_s[2 * i];
        }
    }
    return p;
}

template <int MODE>
__device__ __forceinline__ u64 chase_timed(u64 p, u32 n, u32 gap_ns, u32* __restrict__ lat_out) {
    return chase_timed_ex<MODE, false>(p, n, gap_ns, lat_out, (u32*)0);
}

// The clock window of one chase: %globaltimer and clock64 at its start (clk[0], clk[2]) and,
// after spinning until at least min_window_ns have passed, at its end (clk[1], clk[3]); the
// host converts that chase's cycles to ns with (clk[3] - clk[2]) / (clk[1] - clk[0]), the SM
// clock while it ran (with --clocks none the clock moves between chases). The spin keeps the
// window long against the global timer's coarse ticks.
struct ClockWindow {
    u64 g0, c0;
};

__device__ __forceinline__ ClockWindow clock_window_start() {
    ClockWindow w;
    w.g0 = global_ns();
    w.c0 = sm_clock();
    return w;
}

__device__ __forceinline__ void clock_window_end(const ClockWindow& w, u64* clk, u64 min_window_ns) {
    u64 g = global_ns();
    while (g - w.g0 < min_window_ns) g = global_ns();
    u64 c = sm_clock();
    clk[0] = w.g0;
    clk[1] = g;
    clk[2] = w.c0;
    clk[3] = c;
}

// Streaming: 16-byte vectors, UNROLL independent loads in flight per thread.
#define STREAM_UNROLL 4

// MODE 0: read (XOR into acc), 1: write, 2: copy. Touches s[k * stride] / d[k * stride] for
// k < STREAM_UNROLL (s, d: this thread's first vector; 32-bit offsets keep registers low).
template <int MODE>
__device__ __forceinline__ void stream_step(const uint4* __restrict__ s, uint4* __restrict__ d,
                                            u32 stride, uint4& acc) {
    uint4 v[STREAM_UNROLL];
#pragma unroll
    for (int k = 0; k < STREAM_UNROLL; ++k)
        v[k] = MODE == 1 ? make_uint4(stride, (u32)k, 0u, 0u) : s[k * stride];
#pragma unroll
    for (int k = 0; k < STREAM_UNROLL; ++k) {
        if (MODE == 0) {
            acc.x ^= v[k].x; acc.y ^= v[k].y; acc.z ^= v[k].z; acc.w ^= v[k].w;
        } else {
            d[k * stride] = v[k];
        }
    }
}

// Keeps the XOR of the read data alive without writing in practice.
__device__ __forceinline__ void keep_alive(const uint4& acc, u64* sink) {
    if ((acc.x & acc.y & acc.z & acc.w) == 0xFFFFFFFFu) sink[0] = acc.x;
}
