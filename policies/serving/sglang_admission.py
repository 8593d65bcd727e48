"""SGLang's admission for the serving replay (`--engine sglang --sglang-admission`, ReplayConfig
`sglang_admission`, scheduler RULE_SGLANG_ADMIT): PrefillAdder's token reservation with
`new_token_ratio`, and the retraction of decodes when the pool runs out.

Why: vLLM admits a waiting request when its prompt's blocks fit the free pool; SGLang's
PrefillAdder also keeps room for every running request's FUTURE output tokens, so on a small pool
it runs far fewer requests at once and queues the rest (Qwen3-32B on one H100: measured TTFT
7-89 s where vLLM's rule replays 1-3 s; docs/VALIDATION.md "SGLang rows"). What SGLang 0.5.23
does, in its files (python/sglang/srt/...), and how a block-level replay follows it:

* **The budget of a prefill batch** (managers/schedule_policy.py PrefillAdder, mem_cache/
  prefill_budget.py PrefillBudget): remaining_total = free + evictable KV (prefill_budget.py:92-102)
  - total_offset, where total_offset starts at the running requests' reservations,
  min(max_new_tokens - outputs, CLIP_MAX_NEW_TOKENS = 4096) x new_token_ratio each, the ratio 1
  for an ignore_eos request (schedule_policy.py:673-680, 785-794). A request whose chunked
  prompt continues (add_chunked_req, :1140-1222) reserves a page, plus its max_new_tokens when
  this chunk ends its prompt.
* **A waiting request** (add_one_req, :1395-1588; _select_prefill_admission, :1592-1676) is
  admitted when extend + min(remaining outputs, 4096) + one page < remaining_total, with its
  matched prefix locked out of `evictable` (:1434-1436); admitted, it reserves its extend
  rounded to pages, one page and min(max_new_tokens, 4096) (0 when its prompt is chunked)
  (_update_prefill_budget :868-926, PrefillBudget.reserve :156-168). The replay has already
  allocated the extend's blocks by then, so only the page and the outputs go into the offset.
  The pass stops at the first request refused (NO_TOKEN) or when, after an admission,
  remaining_total <= 0 (budget_state :843-866); a refusal with anything running or admitted sets
  `batch_is_full` (managers/scheduler.py:4279-4285), and no prefill batch admits until a
  request leaves the running batch (a finish or a retraction, scheduler.py:3947-3968, 4545) or
  the previous prefill batch left a chunked request (its exclusion from the merge, :3939-3951).
* **new_token_ratio** (managers/scheduler_components/new_token_ratio_tracker.py): init
  min(SGLANG_INIT_NEW_TOKEN_RATIO 0.7 x schedule_conservativeness 1.0, 1), floor init x 0.14,
  decay (init - floor) / 600 per decode batch without a retraction (scheduler.py:4542); after a
  retraction it is (outputs of the requests kept + 20 x their number) / (their max_new_tokens +
  1), at most 1 (:41-50; scheduler.py:4513).
* **Retraction** (ScheduleBatch.check_decode_mem / retract_decode, managers/schedule_batch.py:
  3403-3450, 3451-3539): before a decode batch, when the pages its requests need next (one for
  each whose written length is a multiple of the page) exceed free + evictable, requests are
  retracted, at least one, until they fit, keeping at least one: the fewest outputs first, the
  longest prompt among equals, the latest in batch order among full ties (_get_decode_retraction
  _order :3541-3580, a stable reverse sort popped from its end). A retracted request frees its KV
  without inserting it into the tree and joins the BACK of the waiting queue with its outputs
  kept (scheduler.py:4540, :3480-3494); vLLM's preemption puts it at the front. The requests
  kept stay in that order of preference (filter_batch(keep_indices), schedule_batch.py:3872).

Not modelled: a page is the replay's block (SGLang's page_size is 1 on most backends), the
continuing chunk's size is the step's token budget (not min(chunk, remaining_total)), the
compute budget rounds nothing to pages; retraction acts in SGLang's decode batches, so the
rule is meant with prefill-alone batches (its default; `policy validate --backend sglang`).
Checked against SGLang's own PrefillAdder, tracker and retraction order on CPU:
bench/sglang_admission_reference.py, tests/test_serving_sglang_admission.py.
"""
from __future__ import annotations

from sitsprof.common.jit import njit

from .pool import available, evictable_among
from .radix import r_release

__all__ = [
    "CK_DECAY",
    "CK_FULL",
    "CK_IGNORE_EOS",
    "CK_INIT",
    "CK_MIN",
    "CK_OFFSET",
    "CK_RATIO",
    "CLIP_MAX_NEW_TOKENS",
    "INIT_NEW_TOKEN_RATIO",
    "MIN_NEW_TOKEN_RATIO_FACTOR",
    "NEW_TOKEN_RATIO_DECAY_STEPS",
    "N_CLOCK",
    "RETRACT_DECODE_STEPS",
    "init_admission",
    "sg_admits",
    "sg_admitted",
    "sg_after_decode_check",
    "sg_decode_fits",
    "sg_pass_start",
    "sg_refused",
    "sg_retract",
    "sg_retract_next",
]

#: SGLang's defaults (environ.py:646-649, schedule_policy.py:89-91)
CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20

# the admission state, in the scheduler's `clock` array after the time (scheduler.new_run_state):
# the ratio now, its init / floor / decay, batch_is_full, ignore_eos, the pass's total_offset
CK_RATIO, CK_INIT, CK_MIN, CK_DECAY, CK_FULL, CK_IGNORE_EOS, CK_OFFSET = range(1, 8)
N_CLOCK = 8


def init_admission(clock, conservativeness: float = 1.0, ignore_eos: bool = False) -> None:
    """Set SGLang's NewTokenRatioTracker.from_config values into `clock` (new_token_ratio_tracker.py:20-32)."""
    init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    floor = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
    clock[CK_RATIO] = init
    clock[CK_INIT] = init
    clock[CK_MIN] = floor
    clock[CK_DECAY] = (init - floor) / NEW_TOKEN_RATIO_DECAY_STEPS
    clock[CK_FULL] = 0.0
    clock[CK_IGNORE_EOS] = 1.0 if ignore_eos else 0.0
    clock[CK_OFFSET] = 0.0


@njit(cache=True, inline="always")
def _clip_left(output, gen, r):
    left = output[r] - gen[r]
    if left < 0:
        left = 0
    return min(left, CLIP_MAX_NEW_TOKENS)


@njit(cache=True)
def sg_pass_start(clock, run, n_run, n_sched, sched, prompt, gen, comp, output, bt):
    """At a prefill batch's admission point: total_offset from the running requests (decoding:
    their remaining outputs x the ratio; a chunked prompt scheduled this pass: a page, plus its
    outputs if this chunk ends the prompt). A chunked prompt continuing clears batch_is_full
    (module docstring). Returns True when the pass may admit (batch_is_full not set)."""
    ratio = 1.0 if clock[CK_IGNORE_EOS] != 0.0 else clock[CK_RATIO]
    if n_run == 0:  # an empty running batch has none to leave (scheduler.py:4093-4096)
        clock[CK_FULL] = 0.0
    off = 0.0
    for i in range(n_sched):
        r = run[i]
        if gen[r] > 0 and comp[r] >= prompt[r] + gen[r] - 1 and sched[i] <= 1:
            off += _clip_left(output, gen, r) * ratio  # decoding (in or out of this batch)
        else:  # a chunked prompt continuing (computed this pass through sched)
            clock[CK_FULL] = 0.0
            off += bt
            if comp[r] + sched[i] >= prompt[r] + gen[r]:
                off += min(output[r], CLIP_MAX_NEW_TOKENS)
    clock[CK_OFFSET] = off
    return clock[CK_FULL] == 0.0


@njit(cache=True)
def sg_admits(clock, pc, ids, b0, hits, ref, known, gen_r, output_r, bt):
    """PrefillAdder.add_one_req's memory check for a waiting request with `hits` cached blocks."""
    rem_total = (available(pc) - evictable_among(ids, b0, hits, ref)) * bt - clock[CK_OFFSET]
    left = output_r - gen_r
    if left < 0:
        left = 0
    total = (known - hits * bt) + min(left, CLIP_MAX_NEW_TOKENS) + bt
    return total < rem_total


@njit(cache=True)
def sg_admitted(clock, pc, chunked, output_r, bt):
    """Reserve for a request just admitted (its blocks already allocated); returns True when the
    pass must stop (budget_state NO_TOKEN: remaining_total <= 0), which sets batch_is_full."""
    clock[CK_OFFSET] += bt + (0 if chunked else min(output_r, CLIP_MAX_NEW_TOKENS))
    if available(pc) * bt - clock[CK_OFFSET] <= 0:
        clock[CK_FULL] = 1.0
        return True
    return False


@njit(cache=True)
def sg_refused(clock, admitted, n_run):
    """A request refused for memory (NO_TOKEN): batch_is_full when anything runs or was admitted."""
    if admitted > 0 or n_run > 0:
        clock[CK_FULL] = 1.0


@njit(cache=True)
def sg_retract_next(pc, run, n_run, prompt, gen, comp, held, bt, first):
    """SGLang's check before a decode batch (check_decode_mem, retract_decode): the position in
    `run` of the next request to retract, or -1 when the batch's next blocks fit (or one request
    is left). `first`: the check failed once already in this call chain, so retract_decode
    retracts at least one (its `first_iter`); the caller frees it (not into the tree), queues
    it at the back, and asks again with first=False."""
    if n_run <= 1:
        return -1
    need = 0
    for i in range(n_run):
        r = run[i]
        need += (comp[r] + bt) // bt - held[r]
    if need <= available(pc) and not first:
        return -1
    # the least preferred to keep: fewest outputs, then longest prompt, then latest in the batch
    best = 0
    for i in range(1, n_run):
        r = run[i]
        b = run[best]
        if gen[r] < gen[b] or (gen[r] == gen[b] and prompt[r] >= prompt[b]):
            best = i
    return best


@njit(cache=True)
def sg_decode_fits(pc, run, n_run, comp, held, bt):
    """check_decode_mem: the next decode's new blocks fit free + evictable."""
    need = 0
    for i in range(n_run):
        r = run[i]
        need += (comp[r] + bt) // bt - held[r]
    return need <= available(pc)


@njit(cache=True)
def sg_after_decode_check(clock, run, n_run, gen, output, retracted):
    """The ratio after a decode batch's memory check: decayed when nothing was retracted,
    re-estimated from the requests kept after a retraction (which also clears batch_is_full)."""
    if not retracted:
        clock[CK_RATIO] = max(clock[CK_RATIO] - clock[CK_DECAY], clock[CK_MIN])
        return
    outs = 0
    mx = 0
    for i in range(n_run):
        outs += gen[run[i]]
        mx += output[run[i]]
    clock[CK_RATIO] = min(1.0, (outs + RETRACT_DECODE_STEPS * n_run) / (mx + 1))
    clock[CK_FULL] = 0.0


@njit(cache=True)
def sg_retract(clock, R, ids, offsets, ref, cached, kind, pc, run, n_run, prompt, gen, comp, held, reg, output,
               status, n_preempt, stats, st_preempt, wq, wh, wn, n, bt, waiting):
    """Before a decode batch: retract (SGLang's order) until its next blocks fit; each retracted
    request frees its blocks without inserting them (radix r_release), keeps its outputs and joins
    the back of the waiting ring wq[wh..wh+wn). Then the ratio decays or is re-estimated.
    Returns (n_run, wn)."""
    retracted = False
    if not sg_decode_fits(pc, run, n_run, comp, held, bt):
        while True:
            i = sg_retract_next(pc, run, n_run, prompt, gen, comp, held, bt, not retracted)
            if i < 0:
                break
            retracted = True
            v = run[i]
            r_release(R, ids, offsets[v], held[v], ref, cached, kind, pc, False, 0, 0, 0)
            held[v] = 0
            reg[v] = 0
            comp[v] = 0
            status[v] = waiting
            for j in range(i, n_run - 1):
                run[j] = run[j + 1]
            n_run -= 1
            wq[(wh + wn) % (n + 1)] = v
            wn += 1
            n_preempt[v] += 1
            stats[st_preempt] += 1
    if retracted:  # filter_batch(keep_indices=...) leaves the batch in retraction-order (stable)
        for i in range(1, n_run):
            r = run[i]
            j = i
            q = run[j - 1] if j > 0 else r
            while j > 0 and (gen[q] < gen[r] or (gen[q] == gen[r] and prompt[q] > prompt[r])):
                run[j] = q
                j -= 1
                q = run[j - 1] if j > 0 else r
            run[j] = r
    sg_after_decode_check(clock, run, n_run, gen, output, retracted)
    return n_run, wn
