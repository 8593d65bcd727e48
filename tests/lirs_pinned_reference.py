"""Plain-Python LIRS with pinned blocks: the rules of policies/serving/evictors/lirs.py in lists
and sets (no numba, no linked arrays), for tests/test_lirs_pinned.py's differential test.

LIRS (Jiang and Zhang, SIGMETRICS 2002; libCacheSim's LIRS, policies/classic/lirs.py): stack S
(LIR blocks, resident HIR blocks, non-resident HIR ids; index 0 is the top), list Q (resident
HIR blocks; index 0 is the newest end, the last entry the oldest, whose block is evicted), and
NH (the non-resident HIR ids in S, newest first). The LIR set holds `capacity - hirs` blocks,
Q `hirs` = max(1, int(0.01 x capacity)).

Pinned blocks (a running request holds them) are never evicted. The victim is Q's oldest
unpinned block: every pinned block passed on the way is *parked*, taken off Q but still
counted in it, and goes back to Q's oldest end when it is unpinned (or to Q's newest end when
it is hit). When Q has only pinned blocks, S's bottom LIR blocks are demoted into Q, one at a
time (each demotion prunes S's bottom), until an unpinned one is there. So each pinned block
is passed at most once per pin; `parks` and `fallback_demotions` count the work, for the
amortised bounds the test checks.
"""
from __future__ import annotations


class PinnedLIRS:
    def __init__(self, capacity: int, hir_ratio: float = 0.01):
        self.cap = capacity
        self.lim_hir = max(1, int(hir_ratio * capacity))
        self.lim_lir = capacity - self.lim_hir
        self.S: list = []
        self.Q: list = []
        self.NH: list = []
        self.parked: set = set()
        self.lir: set = set()
        self.res: set = set()
        self.in_q: set = set()
        self.pinned: set = set()
        self.n_lir = 0
        self.n_hir = 0  # resident HIR blocks: in Q, parked ones included
        self.parks = 0
        self.fallback_demotions = 0
        self.lir_promotions = 0  # blocks that became LIR (admitted as LIR or promoted)

    # ------------------------------------------------------------ pieces

    def _in_s(self, x) -> bool:
        return x in self.S

    def _s_drop(self, x) -> None:
        """x leaves S (its S bits: in S, LIR, resident, cleared, as the form clears them)."""
        self.S.remove(x)
        self.lir.discard(x)
        self.res.discard(x)

    def _to_top(self, lst: list, x) -> None:
        lst.remove(x)
        lst.insert(0, x)

    def _q_unlink(self, x) -> None:
        if x in self.parked:
            self.parked.discard(x)
        else:
            self.Q.remove(x)

    def _q_to_newest(self, x) -> None:
        if x in self.parked:
            self.parked.discard(x)
            self.Q.insert(0, x)
        else:
            self._to_top(self.Q, x)

    def _prune(self) -> None:
        while len(self.S) > 1 and self.S[-1] not in self.lir:
            x = self.S[-1]
            if x in self.NH:
                self.NH.remove(x)
            self._s_drop(x)

    def _evict_q(self, y) -> None:
        self._q_unlink(y)
        self.in_q.discard(y)
        self.res.discard(y)
        if self._in_s(y):
            self.NH.insert(0, y)
        self.n_hir -= 1

    def _oldest_unpinned_q(self):
        while self.Q and self.Q[-1] in self.pinned:
            self.parked.add(self.Q.pop())
            self.parks += 1
        return self.Q[-1] if self.Q else None

    def _lir_out(self):
        """S's bottom block (LIR) leaves S and the LIR set."""
        x = self.S[-1]
        self._s_drop(x)
        self.n_lir -= 1
        return x

    def _into_q(self, x) -> None:
        """x, just out of the LIR set, enters Q's newest end as a resident HIR block; S pruned."""
        if x in self.in_q:
            self._q_to_newest(x)
        else:
            self.Q.insert(0, x)
            self.in_q.add(x)
        self.res.add(x)
        self.n_hir += 1
        self._prune()

    def _demote(self, allow_evict: bool):
        out = None
        while self.n_lir + 1 > self.lim_lir and self.S:
            x = self._lir_out()
            while allow_evict and self.n_hir + 1 > self.lim_hir and self.Q:
                y = self._oldest_unpinned_q()
                if y is None:
                    break
                self._evict_q(y)
                out = y
            self._into_q(x)
        return out

    def _bound(self) -> None:
        while len(self.S) > 2 * self.cap and self.NH:
            x = self.NH.pop()
            if self._in_s(x):
                self._s_drop(x)

    # ------------------------------------------------------------ the evictor's calls

    def hit(self, x):
        """A cached block found again; returns the block this evicted (a Q-only hit may), else None."""
        was_lir, was_q, was_s = x in self.lir, x in self.in_q, self._in_s(x)
        if was_lir:
            self._to_top(self.S, x)
            self._prune()
            return None
        if was_q:
            self._q_to_newest(x)
        out = None
        if was_s:  # resident HIR in S: becomes LIR
            self._to_top(self.S, x)
            self._q_unlink(x)
            self.in_q.discard(x)
            self.n_hir -= 1
            out = self._demote(True)
            self.lir.add(x)
            self.res.add(x)
            self.n_lir += 1
            self.lir_promotions += 1
        else:  # resident HIR only in Q: back onto S's top as HIR
            out = self._demote(True)
            self.S.insert(0, x)
            self.lir.discard(x)
            self.res.add(x)
        self._bound()
        return out

    def miss(self, x) -> None:
        if self._in_s(x):
            self._to_top(self.S, x)

    def victim(self):
        y = self._oldest_unpinned_q()
        if y is not None:
            self._evict_q(y)
            return y
        while self.S:
            self.fallback_demotions += 1
            self._into_q(self._lir_out())
            y = self._oldest_unpinned_q()
            if y is not None:
                self._evict_q(y)
                return y
        return None

    def admit(self, x) -> None:
        """x becomes cached, pinned."""
        self.pinned.add(x)
        if self.lim_lir < 1:
            return
        if self._in_s(x):  # a non-resident HIR id in S: becomes LIR
            self._demote(False)
            if x in self.NH:
                self.NH.remove(x)
            self.lir.add(x)
            self.res.add(x)
            self.n_lir += 1
            self.lir_promotions += 1
        else:
            self.S.insert(0, x)
            if self.n_lir + 1 <= self.lim_lir:
                self.lir.add(x)
                self.res.add(x)
                self.n_lir += 1
                self.lir_promotions += 1
            else:
                self.Q.insert(0, x)
                self.res.add(x)
                self.in_q.add(x)
                self.n_hir += 1
        self._bound()

    def pin(self, x) -> None:
        self.pinned.add(x)

    def unpin(self, x) -> None:
        self.pinned.discard(x)
        if x in self.parked:  # back at Q's oldest end
            self.parked.discard(x)
            self.Q.append(x)
