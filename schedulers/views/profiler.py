"""A-Caching's Profiler: online estimates of each candidate cache's benefit and cost.

Section 4.3 and Appendix A of Babu et al. (../shared/seeds/004_*). Every estimate is the
average of its W most recent observations:

- d_ij, c_ij (tuples per unit time into operator j of pipeline i, cost per tuple there):
  a fraction p of the updates entering pipeline i are *profiled*: processed without any
  cache of that pipeline, counting delta_j tuples and tau_j cost at each operator.
  d_ij = rate(R_i) * sum(delta_j) / W and c_ij = sum(tau_j) / sum(delta_j).
- miss_prob(C): for a used cache, observed (misses / probes over a window of W_d probes);
  otherwise from a Bloom filter of alpha * W_d bits over the keys of each non-overlapping
  window of W_d tuples reaching the cache's first operator: b bits set give b / W_d.
- probe_cost(C), update_cost(C): from the cache implementation (section 3.3): a probe
  costs kappa_probe per probe plus per tuple it returns (an entry holds d_i,k+1 / d_ij
  tuples on average); an insert or delete costs kappa_update per tuple. The kappas are
  measured on used caches; until then they are the operators' cost per tuple in or out
  (a hash probe and a tuple handed on either way).

Costs are in the executor's unit: seconds when it has a timer, else work units (one per
tuple in and out of an operator or a cache), which keeps tests and the simulator exact.
"Unit time" (section 4.1) is one update processed: rate(R_i) is R_i's share of the last
updates. Benefits and costs scale alike, so every comparison is unchanged.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from schedulers.views.pipelines import Candidate

#: Section 7.1's default W (estimates average the last 10 observations).
DEFAULT_WINDOW = 10
#: Tuples per Bloom-filter observation (W_d) and bits per tuple (alpha >= 1, Appendix A).
#: The paper gives no W_d. Profiling waits for W of these observations of the rarest probe
#: stream, and section 4.5 assumes that wait much shorter than I: at 20, Fig. 12's run
#: profiles about an eighth of each I = 10,000 tuples (at 100, nearly half of it); a key
#: coming back after more than W_d probes counts as a miss, so a smaller W_d is cautious
#: about caches (BENCHMARKS.md, "view-tuning").
DEFAULT_BLOOM_TUPLES = 20
DEFAULT_BLOOM_ALPHA = 4
#: A timed probe or cache update above this many times the median of its window counts as
#: that much (ours; None: the paper's plain average). One probe takes about 2 µs here and
#: a collector pause or a preemption makes one take 50 times that: in a mean of W = 10 it
#: would multiply a cache's probe cost several times over until it leaves the window, and
#: a cache dropped on it (refinement a) is never probed again to correct it.
DEFAULT_CLIP = 5.0
#: Updates over which input rates are measured.
DEFAULT_RATE_WINDOW = 1000
#: Bytes of memory a cache entry costs besides its tuples (key and bucket), and per tuple
#: reference it holds (section 3.3: cached values are references, tuples are not copied).
ENTRY_BYTES = 48
REFERENCE_BYTES = 8


@dataclass(frozen=True, slots=True)
class CacheEstimate:
    """What the Re-optimizer knows of a candidate (section 4.1's formulas, evaluated)."""

    benefit: float
    cost: float
    proc: float
    segment_cost: float
    miss_prob: float
    probe_cost: float
    update_cost: float
    entry_tuples: float
    #: Expected bytes when every probed key is cached (section 5's requirement).
    memory: float

    @property
    def net(self) -> float:
        return self.benefit - self.cost


class _Mean:
    """Average of the last W observations. Observations come far more often than estimates
    are read, so adding one is a bare append and the sum is taken when read (W values)."""

    __slots__ = ("values", "clip")

    def __init__(self, window: int, clip: float | None = None) -> None:
        self.values: deque[float] = deque(maxlen=window)
        #: Ours, for timings (``DEFAULT_CLIP``): an observation above ``clip`` times the
        #: window's median counts as that much.
        self.clip = clip

    def add(self, value: float) -> None:
        if self.clip is not None and len(self.values) >= 3:
            middle = statistics.median(self.values)
            if middle > 0:
                value = min(value, self.clip * middle)
        self.values.append(value)

    @property
    def total(self) -> float:
        return sum(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def mean(self, default: float = 0.0) -> float:
        return sum(self.values) / len(self.values) if self.values else default


_MASK = 0xFFFFFFFFFFFFFFFF


def _mix(value: int) -> int:
    """MurmurHash3's 64-bit finaliser over Python's hash: consecutive keys (the common
    case, and Python hashes small ints to themselves) spread like random ones, at a
    fraction of a cryptographic digest's cost per tuple."""
    h = value & _MASK
    h = ((h ^ (h >> 33)) * 0xFF51AFD7ED558CCD) & _MASK
    h = ((h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53) & _MASK
    return h ^ (h >> 33)


class _Bloom:
    """Appendix A: distinct keys among each non-overlapping window of W_d tuples."""

    __slots__ = ("bits", "size", "seen", "tuples")

    def __init__(self, tuples: int, alpha: int) -> None:
        self.size = max(8, alpha * tuples)
        self.tuples = tuples
        self.bits = 0
        self.seen = 0

    def add(self, key: Hashable) -> float | None:
        """Hash the key in; at the window's end return b / W_d and start a new window."""
        self.bits |= 1 << (_mix(hash(key)) % self.size)
        self.seen += 1
        if self.seen < self.tuples:
            return None
        observed = self.bits.bit_count() / self.tuples
        self.bits, self.seen = 0, 0
        return observed


class Profiler:
    """The statistics of one view's pipelines and candidate caches."""

    def __init__(
        self,
        n: int,
        candidates: Iterable[Candidate],
        *,
        window: int = DEFAULT_WINDOW,
        bloom_tuples: int = DEFAULT_BLOOM_TUPLES,
        bloom_alpha: int = DEFAULT_BLOOM_ALPHA,
        rate_window: int = DEFAULT_RATE_WINDOW,
        clip: float | None = DEFAULT_CLIP,
    ) -> None:
        if window < 1 or bloom_tuples < 1 or bloom_alpha < 1 or rate_window < 1:
            raise ValueError("window, bloom_tuples, bloom_alpha and rate_window must be >= 1")
        self.n = n
        self.window = window
        self.bloom_tuples = bloom_tuples
        self.bloom_alpha = bloom_alpha
        self.clip = clip
        # Pipeline i, position p in 0..n-1: p < n-1 is operator p's input; n-1 the output.
        self._delta = [[_Mean(window) for _ in range(n)] for _ in range(n)]
        self._tau = [[_Mean(window) for _ in range(n - 1)] for _ in range(n)]
        # rate(R_i) over the last rate_window updates, kept as two blocks (this one and the
        # last full one) rather than a deque of every update (section 4.3 leaves it open:
        # "maintained in a straightforward manner"). An update is one list increment: the
        # executor adds to ``arrivals`` itself and calls ``roll`` every rate_window updates.
        self.rate_window = rate_window
        #: Updates of each pipeline in the current block (the executor counts them here).
        self.arrivals = [0] * n
        self._last: list[int] | None = None
        #: Observations of any statistic so far: the Re-optimizer looks again only when it moves.
        self.observations = 0
        self._miss: dict[Candidate, _Mean] = {}
        self._blooms: dict[Candidate, _Bloom] = {}
        self._direct: dict[Candidate, list[int]] = {}
        self._kappa_probe = _Mean(window, clip)
        self._kappa_update = _Mean(window, clip)
        for candidate in candidates:
            self._miss[candidate] = _Mean(window)

    # --- observations ---------------------------------------------------------------

    def note_update(self, i: int) -> None:
        """One update of pipeline i (the executor does the same inline: ``arrivals``, ``roll``)."""
        self.arrivals[i] += 1
        if sum(self.arrivals) >= self.rate_window:
            self.roll()

    def roll(self) -> None:
        """The current block is full (``rate_window`` updates): it becomes the last one."""
        self._last = self.arrivals.copy()
        self.arrivals[:] = [0] * self.n  # in place: the executor holds this list

    def record_profiled(self, i: int, deltas: list[int], taus: list[float]) -> None:
        """One profiled update of pipeline i: tuples into each operator (and out), cost in each."""
        for p, (mean, value) in enumerate(zip(self._tau[i], taus, strict=True)):
            if self.clip is not None and deltas[p] and len(mean.values) >= 3:
                # Clipped as the cache's timed costs are, per tuple: both sides of benefit(C).
                per_tuple = [t / d for t, d in zip(mean.values, self._delta[i][p].values) if d]
                middle = statistics.median(per_tuple) if per_tuple else 0.0
                if middle > 0:
                    value = min(value, self.clip * middle * deltas[p])
            mean.values.append(value)
        for mean, value in zip(self._delta[i], deltas, strict=True):
            mean.values.append(value)
        self.observations += 1

    def probe_key(self, candidate: Candidate, key: Hashable) -> None:
        """A tuple reached the first operator of an unused candidate's segment."""
        bloom = self._blooms.get(candidate)
        if bloom is None:
            bloom = self._blooms[candidate] = _Bloom(self.bloom_tuples, self.bloom_alpha)
        observed = bloom.add(key)
        if observed is not None:
            self._miss[candidate].add(observed)  # b <= W_d
            self.observations += 1

    def probe_outcome(self, candidate: Candidate, hit: bool) -> None:
        """A used cache was probed: miss_prob observed directly, per window of W_d probes."""
        counts = self._direct.setdefault(candidate, [0, 0])
        counts[0] += 1
        counts[1] += 0 if hit else 1
        if counts[0] >= self.bloom_tuples:
            self._miss[candidate].add(counts[1] / counts[0])
            counts[0] = counts[1] = 0
            self.observations += 1

    def restart_miss_window(self, candidate: Candidate) -> None:
        """A cache changes state: its partial window would mix two regimes."""
        self._blooms.pop(candidate, None)
        self._direct.pop(candidate, None)

    def forget_miss(self, candidate: Candidate) -> None:
        """An emptied cache misses more than its old observations say; observe afresh."""
        self._miss[candidate] = _Mean(self.window)
        self.restart_miss_window(candidate)

    def probe_cost_sample(self, cost: float, units: int) -> None:
        """Cost of one probe that handled ``units`` (1 + tuples returned)."""
        if units:
            self._kappa_probe.add(cost / units)

    def update_cost_sample(self, cost: float, tuples: int) -> None:
        if tuples:
            self._kappa_update.add(cost / tuples)

    # --- estimates ------------------------------------------------------------------

    def rate(self, i: int) -> float:
        """R_i's share of the last ``rate_window`` updates: the current block, and the last
        full one weighted by the part of the window it still fills (exact at a block's end;
        between, exact when arrivals are even within a block)."""
        seen = sum(self.arrivals)
        if self._last is None:
            return self.arrivals[i] / seen if seen else 0.0
        weight = max(0, self.rate_window - seen) / self.rate_window
        return (self.arrivals[i] + weight * self._last[i]) / (seen + weight * self.rate_window)

    def profiled(self, i: int) -> int:
        return len(self._delta[i][0])

    def d(self, i: int, p: int) -> float:
        """d_ij: tuples per unit time into position p of pipeline i (p = n-1: its output)."""
        return self.rate(i) * self._delta[i][p].mean()

    def c(self, i: int, p: int) -> float:
        """c_ij: cost per tuple of operator p of pipeline i."""
        delta = self._delta[i][p].total
        return self._tau[i][p].total / delta if delta else 0.0

    def op_cost(self, i: int, p: int) -> float:
        return self.d(i, p) * self.c(i, p)

    def _cost_per_unit(self) -> float:
        """Cost of one tuple into or out of an operator: a cache probe or insert is the same
        kind of work (a hash look-up and a tuple handed on), so it prices one until a used
        cache has been measured."""
        units = sum(row[p].total + row[p + 1].total for row in self._delta for p in range(self.n - 1))
        tau = sum(m.total for row in self._tau for m in row)
        return tau / units if units else 1.0

    def kappa(self) -> tuple[float, float]:
        fallback = self._cost_per_unit()
        return self._kappa_probe.mean(fallback), self._kappa_update.mean(fallback)

    def ready(self, candidate: Candidate) -> bool:
        """Section 4.5 step 2: W observations of every statistic the estimate uses."""
        pipelines = {candidate.pipeline, *candidate.members}
        return len(self._miss[candidate]) >= self.window and all(self.profiled(i) >= self.window for i in pipelines)

    def miss_prob(self, candidate: Candidate) -> float:
        return self._miss[candidate].mean(1.0)

    def estimate(self, candidate: Candidate, distinct_keys: float) -> CacheEstimate:
        """Section 4.1: benefit and cost of using ``candidate``, per update processed."""
        i, j, k = candidate.pipeline, candidate.start, candidate.end
        kappa_probe, kappa_update = self.kappa()
        segment = sum(self.op_cost(i, p) for p in range(j, k + 1))
        d_in, d_out = self.d(i, j), self.d(i, k + 1)
        entry = d_out / d_in if d_in else 0.0
        probe_cost = kappa_probe * (1.0 + entry)
        update_cost = kappa_update
        miss = self.miss_prob(candidate)
        proc = d_in * probe_cost + miss * (segment + d_out * update_cost)
        benefit = segment - proc
        # cost(C) = update_cost * sum over the segment's inputs l of d_l,k-j+1: the tuples
        # their own pipelines produce after joining the rest of the segment (section 6: at
        # the CacheUpdate point, after whatever joined before it).
        cost = update_cost * sum(self.d(m, q) for m, q in candidate.update_points.items())
        memory = distinct_keys * (ENTRY_BYTES + REFERENCE_BYTES * entry)
        return CacheEstimate(benefit, cost, proc, segment, miss, probe_cost, update_cost, entry, memory)
