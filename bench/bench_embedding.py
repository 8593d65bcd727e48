"""Embed-and-route time per request for semantic-shard's embedding shard key, measured in one run.

For each of --requests generated prompts (the three-stack generator with prompt text), in
arrival order and one request at a time, as a router would: embed the prompt, find its
cluster (`OnlineClusters.assign`: nearest centroid, join at cosine >= 0.65 or open a new
cluster) and hash the cluster id to one of 16 shards. Prints P50 / P99 / mean milliseconds
per request for each search (numpy; FAISS when installed) and the same requests through a
plain-Python reference of the same embedder and clustering (the ratio is ours against it),
plus the batched path (`cluster_texts`, what a replay uses) as a mean per request.

Each request is timed twice: wall clock (`perf_counter`) and this thread's CPU time
(`thread_time`). On a shared machine the wall-clock tail is mostly the scheduler giving the
core to another process; the CPU-time P99 is the work itself.

    .venv/bin/python bench/bench_embedding.py                    # 10,000 prompts
    .venv/bin/python bench/bench_embedding.py --long 10          # each prompt repeated 10x (~3.7k chars)
    .venv/bin/python bench/bench_embedding.py --embedder sentence-transformers:/models/minilm
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

MASK = 2**64 - 1


def reference_embed(text: str, dim: int) -> list[float]:
    """The hashed embedder in plain Python (the reference the ratio is against)."""
    data = (" " + " ".join(text.lower().split()) + " ").encode("utf-8")
    v = [0.0] * dim
    for i in range(len(data) - 2):
        h = 0xCBF29CE484222325
        for k in range(5):
            if i + k >= len(data):
                break
            h = ((h ^ data[i + k]) * 0x100000001B3) & MASK
            if k >= 2:
                m = ((h ^ (k + 1)) * 0x9E3779B97F4A7C15) & MASK
                v[(m >> 32) % dim] += 1.0 if (m >> 31) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


class ReferenceRouter:
    """Online clustering in plain Python lists."""

    def __init__(self, threshold: float):
        self.threshold, self.sums, self.cents = threshold, [], []

    def assign(self, u: list[float]) -> int:
        best, best_sim = -1, -2.0
        for c, cent in enumerate(self.cents):
            sim = sum(a * b for a, b in zip(cent, u))
            if sim > best_sim:
                best, best_sim = c, sim
        if best >= 0 and best_sim >= self.threshold:
            s = self.sums[best] = [a + b for a, b in zip(self.sums[best], u)]
            n = math.sqrt(sum(x * x for x in s))
            self.cents[best] = [x / n for x in s]
            return best
        self.sums.append(list(u))
        self.cents.append(list(u))
        return len(self.cents) - 1


def shard_of(label: int, shards: int) -> int:
    from sitsprof.policies.traces.hashing import GOLDEN

    return int(((label & MASK) * int(GOLDEN) & MASK) >> 40) % shards


def route_times(prompts, embed, threshold, search, shards) -> tuple[np.ndarray, int]:
    from sitsprof.policies.adaptive.embedding import OnlineClusters

    clusters = None
    times = np.empty((len(prompts), 2))
    for i, text in enumerate(prompts):
        t0, c0 = time.perf_counter(), time.thread_time()
        v = embed([text])[0]
        if clusters is None:
            clusters = OnlineClusters(len(v), threshold, search)
        shard_of(clusters.assign(v), shards)
        times[i] = time.perf_counter() - t0, time.thread_time() - c0
    return times * 1e3, clusters.k


def reference_times(prompts, dim, threshold, shards) -> tuple[np.ndarray, int]:
    router = ReferenceRouter(threshold)
    times = np.empty((len(prompts), 2))
    for i, text in enumerate(prompts):
        t0, c0 = time.perf_counter(), time.thread_time()
        shard_of(router.assign(reference_embed(text, dim)), shards)
        times[i] = time.perf_counter() - t0, time.thread_time() - c0
    return times * 1e3, len(router.cents)


def row(name, ms, clusters) -> dict:
    wall, cpu = ms[:, 0], ms[:, 1]
    return {"path": name, "requests": len(ms), "p50_ms": float(np.percentile(wall, 50)),
            "p99_ms": float(np.percentile(wall, 99)), "mean_ms": float(wall.mean()),
            "cpu_p50_ms": float(np.percentile(cpu, 50)), "cpu_p99_ms": float(np.percentile(cpu, 99)),
            "clusters": int(clusters)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long", type=int, default=1, help="repeat each prompt this many times (longer texts)")
    parser.add_argument("--embedder", default="hashed", help="hashed, hashed:DIM, sentence-transformers:PATH, ...")
    parser.add_argument("--threshold", type=float, default=0.65)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--reference", type=int, default=2_000,
                        help="requests through the plain-Python reference (it is slow); 0 to skip")
    parser.add_argument("--search", choices=["both", "numpy", "faiss"], default="both",
                        help="which nearest-centroid searches to time (both: numpy, and FAISS when installed)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests before each timed pass")
    parser.add_argument("--json", dest="json_out", help="write the rows here")
    args = parser.parse_args(argv)

    from sitsprof.policies.adaptive.embedding import cluster_texts, faiss_available, load_embedder
    from sitsprof.policies.traces.generator import generate_requests

    duration = 1800.0
    requests = generate_requests(seed=args.seed, duration_s=duration, prompts=True)
    while len(requests) < args.requests:
        duration *= 2
        requests = generate_requests(seed=args.seed, duration_s=duration, prompts=True)
    prompts = [" ".join([r.prompt] * args.long) for r in requests[: args.requests]]
    embed = load_embedder(args.embedder)
    embed(prompts[:8])  # compile / load, untimed
    chars = np.mean([len(p) for p in prompts])
    print(f"{len(prompts):,} generated prompts (seed {args.seed}), {chars:.0f} characters on average; "
          f"embedder {args.embedder}, threshold {args.threshold}, {args.shards} shards", flush=True)
    rows = []
    searches = ["numpy"] + (["faiss"] if faiss_available() else []) if args.search == "both" else [args.search]
    for search in searches:
        route_times(prompts[: args.warmup], embed, args.threshold, search, args.shards)  # warm-up
        ms, k = route_times(prompts, embed, args.threshold, search, args.shards)
        rows.append(row(f"per request, {search}", ms, k))
    if not faiss_available():
        print("faiss not installed: numpy search only (pip install faiss-cpu for the FAISS row)")
    t0 = time.perf_counter()
    batched = cluster_texts(prompts, embed, args.threshold, search="numpy")
    per = (time.perf_counter() - t0) * 1e3 / len(prompts)
    rows.append({"path": "batched cluster_texts, numpy", "requests": len(prompts), "p50_ms": None, "p99_ms": None,
                 "mean_ms": per, "cpu_p50_ms": None, "cpu_p99_ms": None, "clusters": batched.clusters})
    if args.reference and args.embedder.startswith("hashed"):
        dim = getattr(embed, "dim", 1024)
        n = min(args.reference, len(prompts))
        ms, k = reference_times(prompts[:n], dim, args.threshold, args.shards)
        rows.append(row("per request, plain-Python reference", ms, k))
        ours, _ = route_times(prompts[:n], embed, args.threshold, "numpy", args.shards)
        rows[-1]["ratio_vs_ours_p50"] = float(np.percentile(ms[:, 0], 50) / np.percentile(ours[:, 0], 50))
    print(f"{'path':38s} {'requests':>8s} {'P50 ms':>8s} {'P99 ms':>8s} {'mean ms':>8s} {'CPU P50':>8s} "
          f"{'CPU P99':>8s} {'clusters':>8s}")
    for r in rows:
        cells = ["-" if r[k] is None else f"{r[k]:.4f}" for k in ("p50_ms", "p99_ms", "mean_ms", "cpu_p50_ms",
                                                                   "cpu_p99_ms")]
        extra = f"  (ours {r['ratio_vs_ours_p50']:.0f}x faster at P50, same first {r['requests']:,})" \
            if "ratio_vs_ours_p50" in r else ""
        print(f"{r['path']:38s} {r['requests']:8,d} " + " ".join(f"{c:>8s}" for c in cells)
              + f" {r['clusters']:8d}{extra}")
    timed = [r for r in rows if r["p99_ms"] is not None and "reference" not in r["path"]]
    wall = max(r["p99_ms"] for r in timed)
    cpu = max(r["cpu_p99_ms"] for r in timed)
    print(f"brief: embed-and-route under 8 ms per request; measured P99 {wall:.3f} ms wall clock, {cpu:.3f} ms "
          f"CPU ({'holds' if max(wall, cpu) < 8 else 'holds in CPU time' if cpu < 8 else 'does not hold'})")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
