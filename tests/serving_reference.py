"""Plain-Python references of the serving-engine replay's rules (issue 11), for the tests.

Independent of `sitsprof.policies.serving` (no numba, no import of it): dicts, lists,
`collections.deque` / `OrderedDict`, written from vLLM's and SGLang's documented behaviour.

vLLM v1 block pool (docs/design/prefix_caching.md "Automatic Prefix Caching" of
vllm-project/vllm, and vllm/v1/core/block_pool.py, kv_cache_manager.py,
single_type_kv_cache_manager.py, sched/scheduler.py, read to learn the rules):
- `capacity` physical blocks, each with a reference count and, once full, a block hash (here
  the block's content id: a re-blocked trace's ids are prefix hashes already). "We only cache
  full blocks" (design doc, Note 1): a partial block never gets a hash.
- A cached block maps hash -> {physical block: ...}; vLLM does not de-duplicate (block
  tables are append-only: design doc "Duplicated blocks"; BlockPool.cached_block_hash_to_block
  comment), so two requests that computed the same block hold two cached copies and a lookup
  takes the first one registered (`get_cached_block`). `duplicates="single"` is the variant
  where one id has one cached copy and a later copy stays an uncached private block (the
  replay in policies/serving/pool.py states that rule); the differential test uses that one.
- Free blocks sit in one free queue (FreeKVCacheBlockQueue): never-used blocks and blocks freed
  without a hash at its head (BlockPool.free_blocks prepends "fresh" blocks, so they are used
  first), cached blocks with ref 0 appended at its tail; allocation pops the head, and a
  popped block that is cached is EVICTED (its hash dropped: `_maybe_evict_cached_block`).
  So the head of the cached part is the LRU victim (design doc "Eviction (LRU)").
- Lookup (`KVCacheManager.get_computed_blocks`): the longest run of cached full blocks from
  the first block, stopping at the first miss, with max_cache_hit_length = num_tokens - 1
  ("we must recompute the last token to obtain logits"), i.e. at most
  floor((num_tokens - 1) / block_tokens) blocks.
- allocate_slots: the new blocks needed are ceil((computed + new tokens) / block) minus the
  blocks held and hit; refused (None) when that exceeds the free queue's length minus the hit
  blocks that sit in it (ref 0); otherwise the hit blocks are "touched" (ref++, removed from the
  free queue), the new blocks popped, and every block that the scheduled tokens make full gets
  its hash at once ("so that the block can be reused by other requests in the same batch").
- Free (finish or preemption): ref-- on every block of the request in REVERSE order
  (tail first: "the last block of a request must hash more tokens and is less likely to be
  reused"), blocks reaching 0 appended to the free queue in that order.

vLLM v1 scheduler (sched/scheduler.py `Scheduler.schedule`, FCFS policy):
- token budget max_num_batched_tokens per step; RUNNING requests first, in list order, each
  scheduled for min(num_tokens - num_computed_tokens, budget) tokens (chunked prefill; one
  decode token once the prompt is in). When allocate_slots fails, `self.running.pop()`: the
  LAST running request (the newest) is preempted (`_preempt_request`: blocks freed, computed
  tokens reset to 0, output tokens kept, `waiting.prepend_request`: to the FRONT of the waiting
  queue), repeated until it fits or the request itself was the one popped.
- Only if nothing was preempted this step: WAITING requests in FCFS order while
  len(running) < max_num_seqs and budget remains: a request with no computed tokens looks up
  its cached prefix; num_new_tokens = num_tokens - computed (num_tokens counts the outputs of a
  resumed request), chunked to the budget; allocate_slots, and the first that cannot be
  allocated stops admission (`break`).
- Admission gate, vLLM 0.33.0 (`SchedulerConfig.scheduler_reserve_full_isl = True`, passed by
  the waiting loop as `allocate_slots(full_sequence_must_fit=...)`): allocate_slots first
  checks that ceil(num_tokens / block) minus the hit blocks, plus the hit blocks that sit in
  the free queue, is at most the free queue's length (`get_num_blocks_to_allocate(num_tokens=
  request.num_tokens)`), i.e. the WHOLE known sequence fits, and only then the chunk.
  `reserve_full_isl=False` is the rule before 0.33: the first chunk only.
- `serial=True` is "one request at a time": a request joins the waiting queue only when nothing
  runs and nothing waits, so requests that arrive together are served one after another.
- After the step (update_from_output): a request whose computed tokens reach num_tokens
  samples one token; with output_tokens of them it finishes and frees its blocks. The last
  output token's KV is never written, so a request ends holding
  ceil((prompt + output - 1) / block) blocks; one that needs more than the pool is rejected.

SGLang radix cache (python/sglang/srt/mem_cache/radix_cache.py `RadixCache`, SGLang 0.5.23),
at block granularity: an entry per cached block, its parent the previous block of the prefix.
SGLang's tree NODES are runs of blocks: a node is what one insert added, and an insert happens
at each prefill chunk (`checkpoint_kv_cache` -> `checkpoint`, up to the chunk's end) and when a
request finishes (`release_kv_cache(checkpoint=True)`: the whole written sequence, with the
node split at the prompt's last full page, `split_prompt`); decoded tokens stay private until
then, and a retracted request inserts nothing (`checkpoint=False`). Here a node is a chain of
blocks: `head` marks its first block, `nxt` the next block of the same node. A walk (match or
insert) that ends inside a node splits it there (`_split_node`); a match stamps its path and
the child it splits (`child.last_access_time` is set before the split, so the unmatched rest
is refreshed too); an insert stamps its whole path. `inc_lock_ref` / `dec_lock_ref` lock the
path of a running request (here a lock count per block for each running request holding
it); `evict` takes the unlocked LEAF node with the smallest last_access_time and frees it
WHOLE (every block of it), repeating until the shortfall is met; its parent, once childless
and unlocked, becomes a leaf that competes by its own time. An insert of a block already in
the tree keeps the tree's copy and frees the request's duplicate. Access time is a counter
that ticks once per walk (SGLang stamps a walk with one `time.monotonic()`).

Time: a step starts at `now`; requests with arrival <= now join the waiting queue first; the
step lasts `step_time` (a number, or a callable of the `Step` record); when nothing runs or
waits the clock jumps to the next arrival.
"""
from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def blocks_needed(prompt_tokens: int, output_tokens: int, block_tokens: int) -> int:
    """Blocks a request holds at its end: the KV of prompt + output - 1 tokens."""
    return ceil_div(prompt_tokens + output_tokens - 1, block_tokens)


@dataclass
class Request:
    """One request. `blocks` are content ids of its blocks in order: at least its full prompt
    blocks (prompt_tokens // block_tokens of them); blocks past the list get private ids that no
    other request has."""

    arrival: float
    blocks: Sequence[int]
    prompt_tokens: int
    output_tokens: int


@dataclass
class Outcome:
    index: int
    status: str = "future"  # done | rejected
    reason: str = ""
    first_scheduled_step: int = -1
    first_token_step: int = -1
    finish_step: int = -1
    first_scheduled_time: float = -1.0
    first_token_time: float = -1.0
    finish_time: float = -1.0
    cached_blocks: int = -1  # hit blocks at the first admission
    admissions: list = field(default_factory=list)  # hit blocks at each admission
    preemptions: int = 0


@dataclass
class Step:
    index: int
    start: float
    # (request index, tokens, computed tokens before the step, output tokens sampled before the
    # step, blocks in its table once the step's blocks are allocated, prompt + outputs known)
    scheduled: list
    n_running: int


@dataclass
class Result:
    requests: list
    evictions: list  # content ids in eviction order
    hit_blocks: int  # sum over admissions
    steps: list  # Step records (replay(record_steps=True), or a callable step_time), else empty
    n_steps: int
    end_time: float
    preemptions: int
    rejected: int


# ---------------------------------------------------------------------------------------
# vLLM v1 block pool


class VllmPool:
    """BlockPool + free queue (LRU), physical blocks 0..capacity-1."""

    def __init__(self, capacity: int, duplicates: str = "vllm", fresh_first: bool = True):
        if duplicates not in ("vllm", "single"):
            raise ValueError(duplicates)
        self.capacity = capacity
        # True: BlockPool.free_blocks as vLLM has it now (a freed block without a hash goes to the
        # queue's head); False: as the design doc's example shows it (every freed block appended
        # to the tail, so an uncached freed block waits its turn behind cached ones)
        self.fresh_first = fresh_first
        self.duplicates = duplicates
        self.ref = [0] * capacity
        self.content: list = [None] * capacity  # the block hash (content id) once cached
        self.fresh: deque = deque(range(capacity))  # head of the free queue: blocks with no hash
        self.lru: OrderedDict = OrderedDict()  # cached blocks with ref 0, first = LRU victim
        self.cached: dict = {}  # content id -> {physical: None}, in registration order
        self.evictions: list = []
        self.free_events = 0  # calls that can give blocks back (the scheduler's retry shortcut)

    def num_free(self) -> int:
        return len(self.fresh) + len(self.lru)

    def lookup(self, ids: Sequence[int], max_blocks: int) -> int:
        k = 0
        while k < max_blocks and ids[k] in self.cached:
            k += 1
        return k

    def _first(self, x: int) -> int:
        return next(iter(self.cached[x]))

    def can_allocate(self, hit_ids: Sequence[int], n_new: int) -> bool:
        free = self.num_free()
        if n_new > free:
            return False
        if n_new <= free - len(hit_ids):  # even if every hit block sits in the free queue
            return True
        ref, cached = self.ref, self.cached
        in_queue = sum(1 for x in hit_ids if ref[next(iter(cached[x]))] == 0)
        return n_new <= free - in_queue

    def touch(self, hit_ids: Sequence[int]) -> list:
        phys = []
        for x in hit_ids:
            p = self._first(x)
            if self.ref[p] == 0:
                del self.lru[p]
            self.ref[p] += 1
            phys.append(p)
        return phys

    def new_blocks(self, n: int) -> list:
        out = []
        for _ in range(n):
            if self.fresh:
                p = self.fresh.popleft()
            else:
                p, _ = self.lru.popitem(last=False)
                x = self.content[p]
                if x is None:  # an uncached block in the one-queue order: nothing to evict
                    self.ref[p] = 1
                    out.append(p)
                    continue
                copies = self.cached[x]
                del copies[p]
                if not copies:
                    del self.cached[x]
                self.content[p] = None
                self.evictions.append(x)
            self.ref[p] = 1
            out.append(p)
        return out

    def register(self, p: int, x: int) -> None:
        """Block p became full holding content x."""
        if self.content[p] is not None:
            return
        if self.duplicates == "single" and x in self.cached:
            return  # stays an uncached private copy
        self.content[p] = x
        self.cached.setdefault(x, {})[p] = None

    def free(self, phys: Sequence[int]) -> None:
        """Free a request's blocks (given in table order): tail first."""
        self.free_events += 1
        for p in reversed(phys):
            self.ref[p] -= 1
            if self.ref[p] == 0:
                if self.content[p] is None and self.fresh_first:
                    self.fresh.appendleft(p)
                else:
                    self.lru[p] = None

    def is_cached(self, x) -> bool:
        return x in self.cached

    def pinned_content(self) -> set:
        return {self.content[p] for p in range(self.capacity) if self.ref[p] > 0 and self.content[p] is not None}


# ---------------------------------------------------------------------------------------
# SGLang radix cache at block granularity


class _Node:
    __slots__ = ("parent", "children", "lock", "access", "head", "nxt", "born", "hits", "priority")

    def __init__(self, parent, born=0):
        self.parent = parent
        self.children: set = set()
        self.lock = 0
        self.access = 0
        self.head = True  # first block of an SGLang node
        self.nxt = None  # the next block of the same SGLang node
        self.born = born  # creation_time
        self.hits = 0  # hit_count
        self.priority = 0


#: evict_policy.py's strategies: the key each sorts leaf nodes by (smallest evicted first)
RADIX_KEYS = {
    "lru": lambda n: n.access,
    "lfu": lambda n: (n.hits, n.access),
    "fifo": lambda n: n.born,
    "mru": lambda n: -n.access,
    "filo": lambda n: -n.born,
    "priority": lambda n: (n.priority, n.access),
}


_ROOT = object()


class RadixPool:
    """RadixCache: a tree entry per cached block; slots = tree blocks + uncached private blocks.

    A request's table entries are ("node", content id) for blocks in the tree (locked by it)
    and ("priv", None) for its blocks not (yet) in the tree."""

    def __init__(self, capacity: int, policy: str = "lru"):
        self.capacity = capacity
        self.key = RADIX_KEYS[policy]
        self.nodes: dict = {}
        self.n_private = 0
        self.n_unlocked = 0
        self.clock = 0
        self.heap: list = []  # (key, content id) of candidate leaf tails, validated on pop
        self.evictions: list = []
        self.free_events = 0

    def free_slots(self) -> int:
        return self.capacity - len(self.nodes) - self.n_private

    def num_free(self) -> int:
        # every unlocked node is evictable: a locked node's ancestors are locked (path locks)
        return self.free_slots() + self.n_unlocked

    def _walk(self) -> int:
        self.clock += 1
        return self.clock

    def _stamp(self, x, t) -> None:
        node = self.nodes[x]
        node.access = t
        if node.lock == 0 and not node.children:
            heapq.heappush(self.heap, (self.key(node), x))

    def _split(self, x, t) -> None:
        """A walk ended at x inside its node: the rest becomes its own node, stamped; the part
        up to x is a node made now (its creation time is t)."""
        rest = self.nodes[x].nxt
        if rest is None:
            return
        self.nodes[x].nxt = None
        self.nodes[rest].head = True
        y = x
        while True:
            self.nodes[y].born = t
            if self.nodes[y].head:
                break
            y = self.nodes[y].parent
        while rest is not None:
            self._stamp(rest, t)
            rest = self.nodes[rest].nxt

    def lookup(self, ids: Sequence[int], max_blocks: int) -> int:
        k = 0
        parent = _ROOT
        while k < max_blocks and ids[k] in self.nodes:
            assert self.nodes[ids[k]].parent == parent, "block ids are not prefix ids"
            parent = ids[k]
            k += 1
        return k

    def can_allocate(self, hit_ids: Sequence[int], n_new: int) -> bool:
        free = self.num_free()
        if n_new > free:
            return False
        if n_new <= free - len(hit_ids):
            return True
        nodes = self.nodes
        unlocked_hits = sum(1 for x in hit_ids if nodes[x].lock == 0)
        return n_new <= free - unlocked_hits

    def _lock(self, x) -> None:
        node = self.nodes[x]
        if node.lock == 0:
            self.n_unlocked -= 1
        node.lock += 1

    def _unlock(self, x) -> None:
        node = self.nodes[x]
        node.lock -= 1
        if node.lock == 0:
            self.n_unlocked += 1
            if not node.children:
                heapq.heappush(self.heap, (self.key(node), x))

    def touch(self, hit_ids: Sequence[int]) -> list:
        t = self._walk()
        for x in hit_ids:  # match_prefix stamps the path
            self._stamp(x, t)
            self._lock(x)
        if hit_ids:
            self._split(hit_ids[-1], t)
        return [("node", x) for x in hit_ids]

    def _evict_node(self) -> None:
        while True:
            key, x = heapq.heappop(self.heap)
            node = self.nodes.get(x)
            if node is None or node.lock or node.children or self.key(node) != key:
                continue
            while True:  # the tail up to the node's head, freed whole
                node = self.nodes.pop(x)
                assert node.lock == 0 and not node.children, "a node is locked and freed whole"
                self.n_unlocked -= 1
                self.evictions.append(x)
                parent = node.parent
                if parent is not _ROOT:
                    pn = self.nodes[parent]
                    pn.children.discard(x)
                    if not node.head:
                        pn.nxt = None
                if node.head:
                    if parent is not _ROOT and not pn.children and pn.lock == 0:
                        heapq.heappush(self.heap, (self.key(pn), parent))
                    return
                x = parent

    def new_blocks(self, n: int) -> list:
        out = []
        for _ in range(n):
            if self.free_slots() <= 0:
                self._evict_node()
            self.n_private += 1
            out.append(("priv", None))
        return out

    def insert(self, table: list, ids: Sequence, upto: int, inserted: int = 0) -> None:
        """One SGLang insert of the request's first `upto` blocks: those not in the tree join it
        (the new ones as one node, the ones already there freed as duplicates), the path is
        stamped, a node the insert ends or diverges inside is split, and every node past the
        `inserted` blocks this request inserted before counts a hit (`_inc_hit_count`)."""
        t = self._walk()
        new_prev = None
        for j in range(upto):
            if table[j][0] == "node":
                continue
            self.n_private -= 1
            x = ids[j]
            parent = ids[j - 1] if j else _ROOT
            if x in self.nodes:  # the request's copy is dropped: a slot comes free
                self.free_events += 1
            else:
                node = _Node(parent, born=t)
                self.nodes[x] = node
                self.n_unlocked += 1  # counted unlocked, then locked by this request
                if parent is not _ROOT:
                    pn = self.nodes[parent]
                    if new_prev is not None:
                        node.head = False
                        pn.nxt = x
                    else:  # diverging inside the parent's node splits it
                        self._split(parent, t)
                    pn.children.add(x)
                new_prev = x
            self._lock(x)
            table[j] = ("node", x)
        for j in range(upto):
            if j >= inserted:
                self.nodes[ids[j]].hits += 1
            self._stamp(ids[j], t)
        if upto:
            self._split(ids[upto - 1], t)

    def free(self, table: list, finished: bool, ids: Sequence = (), written: int = 0,
             prompt_blocks: int = 0, inserted: int = 0) -> None:
        self.free_events += 1
        if finished:  # release_kv_cache(checkpoint=True): insert, the prompt again, match
            full = min(written, len(table))
            self.insert(table, ids, full, inserted)
            if 0 < prompt_blocks < full:  # split_prompt: priority + 1 along the prompt
                t = self._walk()
                for x in ids[:prompt_blocks]:
                    self.nodes[x].priority = max(self.nodes[x].priority, 1)
                self._split(ids[prompt_blocks - 1], t)
            t = self._walk()
            for x in ids[:full]:
                self._stamp(x, t)
        for e in reversed(table):
            if e[0] == "node":
                self._unlock(e[1])
            else:
                self.n_private -= 1

    def is_cached(self, x) -> bool:
        return x in self.nodes

    def pinned_content(self) -> set:
        return {x for x, node in self.nodes.items() if node.lock > 0}


# ---------------------------------------------------------------------------------------
# the scheduler


class _Req:
    __slots__ = ("i", "ids", "prompt", "output", "computed", "generated", "table", "registered", "out")

    def __init__(self, i, ids, prompt, output, out):
        self.i = i
        self.ids = ids
        self.prompt = prompt
        self.output = output
        self.computed = 0
        self.generated = 0
        self.table: list = []  # physical blocks (vLLM) / entries (radix), in order
        self.registered = 0  # leading blocks that got their hash
        self.out = out

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.generated


def _content_ids(req: Request, block_tokens: int, next_private: list) -> list:
    need = blocks_needed(req.prompt_tokens, req.output_tokens, block_tokens)
    ids = list(req.blocks[:need])
    full = req.prompt_tokens // block_tokens
    if len(ids) < min(full, need):
        raise ValueError(f"request lists {len(ids)} blocks; its prompt has {full} full blocks")
    while len(ids) < need:
        ids.append(next_private[0])
        next_private[0] -= 1  # private ids: negative, unique
    return ids


def replay(requests: Sequence[Request], capacity: int, *, block_tokens: int = 16,
           max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
           step_time: float | Callable[[Step], float] = 1.0, engine: str = "vllm",
           duplicates: str = "vllm", fresh_first: bool = True, record_steps: bool = False,
           observe: Callable | None = None, reserve_full_isl: bool = True, serial: bool = False,
           policy: str = "lru") -> Result:
    """Replay `requests` (in arrival order, ties by index) through the engine's rules.

    `observe(pool, running)`, when given, is called after each step is scheduled with the pool
    and the running requests (objects with `.i`, `.table`, `.ids`, `.registered`), for tests of
    invariants."""
    if engine == "vllm":
        pool = VllmPool(capacity, duplicates, fresh_first)
    elif engine == "sglang":
        pool = RadixPool(capacity, policy)
    else:
        raise ValueError(f"unknown engine {engine!r}")
    bt = block_tokens
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival, i))
    outcomes = [Outcome(index=i) for i in range(len(requests))]
    next_private = [-1]
    reqs = {}
    for i in order:
        r = requests[i]
        reqs[i] = _Req(i, _content_ids(r, bt, next_private), r.prompt_tokens, max(1, r.output_tokens), outcomes[i])
    waiting: deque = deque()
    blocked = None  # (head, free events, budget, its next block id, evictions) of the last failed admission
    # SGLang frees whole nodes: an eviction can take the head's unlocked hit blocks, and a
    # budget-capped chunk then asks no more blocks while fewer unlocked hits are held back
    n_evicted = (lambda: len(pool.evictions)) if engine == "sglang" else (lambda: 0)
    running: list = []
    steps: list = []
    n_steps = 0
    now = 0.0
    nxt = 0
    remaining = len(order)
    hit_total = 0
    n_preempt = 0
    n_rejected = 0

    def register_full(q: _Req, upto_tokens: int) -> None:
        full = min(upto_tokens, q.num_tokens) // bt
        if full <= q.registered:
            return
        for j in range(q.registered, full):
            pool.register(q.table[j], q.ids[j])
        q.registered = max(q.registered, full)

    def sglang_insert(q: _Req, upto_tokens: int, inserted: int) -> None:
        """SGLang's checkpoint: every prefill chunk inserts the request's pages so far."""
        full = min(upto_tokens, q.num_tokens) // bt
        pool.insert(q.table, q.ids, full, inserted)
        q.registered = max(q.registered, full)

    def release(q: _Req, finished: bool) -> None:
        if engine == "vllm":
            pool.free(q.table)
        else:  # the KV of every token but the last sampled one is written
            pool.free(q.table, finished, q.ids, (q.prompt + q.generated - 1) // bt, q.prompt // bt, q.registered)
        q.table = []
        q.registered = 0

    while remaining:
        while nxt < len(order) and requests[order[nxt]].arrival <= now:
            if serial and (running or waiting):
                break
            q = reqs[order[nxt]]
            nxt += 1
            need = len(q.ids)
            if need > capacity:
                q.out.status = "rejected"
                q.out.reason = (f"needs {need} blocks of {bt} tokens (prompt {q.prompt} + output {q.output} - 1 "
                                f"tokens), the pool holds {capacity}")
                n_rejected += 1
                remaining -= 1
            else:
                waiting.append(q)
        if not running and not waiting:
            if nxt >= len(order):
                break
            now = requests[order[nxt]].arrival
            continue
        budget = max_num_batched_tokens
        scheduled: list = []  # (req, tokens, computed before)
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            q = running[i]
            new = min(q.num_tokens - q.computed, budget)
            ok = False
            while True:
                need = ceil_div(q.computed + new, bt) - len(q.table)
                if need <= 0 or pool.can_allocate((), need):
                    ok = True
                    break
                victim = running.pop()
                release(victim, finished=False)
                victim.computed = 0
                waiting.appendleft(victim)
                victim.out.preemptions += 1
                n_preempt += 1
                preempted = True
                if victim is q:
                    break
            if not ok:
                break
            if need > 0:
                q.table.extend(pool.new_blocks(need))
            if engine == "sglang":
                if not (q.generated and new == 1):  # SGLang inserts decoded tokens at the finish
                    sglang_insert(q, q.computed + new, q.registered)
            elif (q.computed + new) // bt > q.registered:
                register_full(q, q.computed + new)
            scheduled.append((q, new, q.computed))
            budget -= new
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < max_num_seqs:
                q = waiting[0]
                if (blocked is not None and blocked[0] is q and blocked[1] == pool.free_events
                        and budget >= blocked[2] and not (blocked[3] is not None and pool.is_cached(blocked[3]))
                        and blocked[4] == n_evicted()):
                    # A shortcut, not a rule: the head failed before and nothing since can let it
                    # fit. Only a free (or a radix de-duplication) adds room; a registration of
                    # the block after its hit prefix lengthens the hit; a smaller budget asks
                    # fewer blocks; under SGLang an eviction can shorten its hit (above).
                    # Touches and allocations only keep it failing.
                    break
                maxb = (q.num_tokens - 1) // bt
                hits = pool.lookup(q.ids, maxb) if q.computed == 0 else 0
                new = min(q.num_tokens - hits * bt, budget)
                need = ceil_div(hits * bt + new, bt) - hits
                gate = need
                if reserve_full_isl:  # the whole known sequence must fit before any chunk is
                    gate = max(need, ceil_div(q.num_tokens, bt) - hits)
                hit_ids = q.ids[:hits]
                if not pool.can_allocate(hit_ids, gate):
                    blocked = (q, pool.free_events, budget, q.ids[hits] if hits < maxb else None, n_evicted())
                    break
                blocked = None
                waiting.popleft()
                q.table = pool.touch(hit_ids) + pool.new_blocks(need)
                q.registered = hits
                q.computed = hits * bt
                if engine == "sglang":
                    sglang_insert(q, q.computed + new, 0)
                else:
                    register_full(q, q.computed + new)
                if q.out.first_scheduled_step < 0:
                    q.out.first_scheduled_step = n_steps
                    q.out.first_scheduled_time = now
                    q.out.cached_blocks = hits
                q.out.admissions.append(hits)
                hit_total += hits
                running.append(q)
                scheduled.append((q, new, q.computed))
                budget -= new
        if not scheduled:
            raise RuntimeError("nothing could be scheduled (the pool cannot hold any waiting request)")
        if observe is not None:
            observe(pool, running)
        index = n_steps
        n_steps += 1
        if record_steps or callable(step_time):
            step = Step(index=index, start=now, n_running=len(running),
                        scheduled=[(q.i, n, c, q.generated, len(q.table), q.num_tokens) for q, n, c in scheduled])
            if record_steps:
                steps.append(step)
            now += step_time(step) if callable(step_time) else step_time
        else:
            now += step_time
        done_now = set()
        for q, n, _c in scheduled:
            q.computed += n
            if q.computed >= q.num_tokens:
                q.generated += 1
                if q.out.first_token_step < 0:
                    q.out.first_token_step = index
                    q.out.first_token_time = now
                if q.generated >= q.output:
                    release(q, finished=True)
                    q.out.status = "done"
                    q.out.finish_step = index
                    q.out.finish_time = now
                    done_now.add(q.i)
                    remaining -= 1
        if done_now:
            running = [q for q in running if q.i not in done_now]
    return Result(requests=outcomes, evictions=list(pool.evictions), hit_blocks=hit_total, steps=steps,
                  n_steps=n_steps, end_time=now, preemptions=n_preempt, rejected=n_rejected)


# ---------------------------------------------------------------------------------------
# re-blocking, written independently of policies/serving/reblock.py


def reblock_records(records: Sequence[dict], block_tokens: int = 16, trace_block_tokens: int = 512,
                    ms_per_second: float = 1000.0) -> list:
    """Mooncake-style records (timestamp ms, input_length, output_length, hash_ids) -> Requests
    at `block_tokens`: coarse id h at position j covers 512 tokens (the last: the rest) and becomes
    ceil(that / block_tokens) fine blocks (h, k); only the FULL fine blocks are listed (the
    partial last one and every decode block are private to the request)."""
    if trace_block_tokens % block_tokens:
        raise ValueError("block_tokens must divide the trace's block size")
    out = []
    for rec in records:
        hashes = rec["hash_ids"]
        # the trace reader's token counts: every coarse block full but the last, which carries
        # input - 512 (n - 1) tokens clipped to [1, 512]
        last = min(max(int(rec["input_length"]) - trace_block_tokens * (len(hashes) - 1), 1), trace_block_tokens)
        p = trace_block_tokens * (len(hashes) - 1) + last
        full = p // block_tokens
        ids = []
        for j, h in enumerate(hashes):
            tokens = trace_block_tokens if j < len(hashes) - 1 else last
            for k in range(ceil_div(tokens, block_tokens)):
                if len(ids) < full:
                    ids.append((int(h), k))
        out.append(Request(arrival=float(rec["timestamp"]) / ms_per_second, blocks=ids, prompt_tokens=p,
                           output_tokens=max(1, int(rec.get("output_length", 1)))))
    return out


def random_case(rng):
    """A small random workload: prompts that branch off a few shared prefixes, tiny pools,
    budgets and sequence limits, so preemption chains, blocked admissions, chunking and
    rejections all happen within a few requests."""
    bt = int(rng.choice([1, 2, 4]))
    n = int(rng.integers(2, 12))
    t = 0.0
    requests = []
    for i in range(n):
        t += float(rng.choice([0.0, 0.0, 0.5, 1.0, 3.0]))
        root = int(rng.integers(0, 3))
        shared = int(rng.integers(0, 5))
        prompt = int(rng.integers(1, 9 * bt))
        full = prompt // bt
        ids = [f"s{root}.{k}" if k < shared else f"r{i}.{k}" for k in range(full)]
        requests.append(Request(t, ids, prompt, int(rng.integers(1, 8))))
    knobs = dict(block_tokens=bt, max_num_batched_tokens=int(rng.integers(1, 5 * bt + 2)),
                 max_num_seqs=int(rng.integers(1, 5)), step_time=float(rng.choice([1.0, 0.25])))
    capacity = int(rng.integers(1, 14))
    return requests, capacity, knobs
