"""Adaptive draft length: each lane drafts as many tokens as its recent acceptance pays for, and a step
speculates only while the expected tokens per unit of time beat a plain decode step.

Per lane, acceptance is an exponentially decayed count of judged drafts: `accepted` and `trials` (a round with k
drafts and a accepted observed a + 1 Bernoulli trials if it rejected one, k if it accepted all), so the rate
alpha = accepted / trials estimates the chance that the next draft is accepted. Under that geometric model a
round of K drafts yields E(K) = 1 + alpha + ... + alpha^K tokens. A round at K costs cost(K) plain steps
(`StepCosts`): the lane's K is argmax E(K) / cost(K), and the step's K is the one that maximizes the batch's
tokens per unit of time, sum over lanes of E_l(min(K_l, K)) / cost(K), with K = 0 (a plain step) scoring
one token per lane at cost 1.

A lane that does not draft still lets the MTP head see its positions, and every `probe_every` rounds it drafts
one token anyway (a probe): in a speculative step the probe is verified as usual, in a plain step it is only
compared with the token the target chose (a shadow check: exact for greedy requests, a lower bound of the
acceptance for sampled ones). That is how a lane whose text became predictable starts speculating again. Each
probe doubles the lane's wait for the next, up to `probe_max` rounds, until a draft of the lane is accepted: a
probe's draft reads the draft head (the whole lm_head of a bf16 model), which a lane whose drafts keep failing
should not pay every few steps.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from hinfer.engine.cuda_graphs import BUCKETS

DEFAULT_DRAFT_COST = 0.3  # a round at K costs 1 + c * K plain steps until the engine has timed both


@dataclass
class LaneAcceptance:
    """One lane's decayed acceptance counts (starting from a prior worth `prior_trials` trials)."""

    accepted: float
    trials: float
    rounds_since_draft: int = 0
    probe_gap: int = 0  # rounds between this lane's probes now (0: the policy's probe_every)

    @property
    def rate(self) -> float:
        return self.accepted / self.trials if self.trials > 0 else 0.0


def expected_tokens(rate: float, k: int) -> float:
    """Tokens a round of k drafts yields when each draft is accepted with probability `rate` (geometric)."""
    return sum(rate**i for i in range(k + 1))


@dataclass
class StepCosts:
    """Cost of a decode step at batch K relative to a plain step with as many lanes: the median of the last
    `window` host wall times of decode-only steps per (lane bucket, K), or the default model 1 + c * K where a pair
    is not timed yet. A key's first sample is dropped and the median ignores the rest's stalls: a step of a kind
    not run before may compile its kernels (seconds on a GPU), and a decayed mean kept such a sample for hundreds
    of steps, long enough for a policy that then never speculates to never time a speculative step again.
    `measure=False` keeps the default model (deterministic tests, or a cost the operator knows)."""

    k_max: int
    draft_cost: float = DEFAULT_DRAFT_COST
    measure: bool = True
    window: int = 15
    min_samples: int = 3
    _sec: dict[tuple[int, int], deque[float]] = field(default_factory=dict)  # a key's samples after its first

    @staticmethod
    def bucket(lanes: int) -> int:
        return next((b for b in BUCKETS if b >= lanes), lanes)

    def record(self, lanes: int, k: int, seconds: float) -> None:
        if not self.measure:
            return
        key = (self.bucket(lanes), k)
        if key in self._sec:
            self._sec[key].append(seconds)
        else:  # the first sample: dropped
            self._sec[key] = deque(maxlen=self.window)

    def _timed(self, key: tuple[int, int]) -> float | None:
        times = self._sec.get(key)
        return statistics.median(times) if times and len(times) >= self.min_samples else None

    def ratio(self, lanes: int, k: int) -> float:
        if k == 0:
            return 1.0
        b = self.bucket(lanes)
        tk, t0 = self._timed((b, k)), self._timed((b, 0))
        if tk is not None and t0 is not None:
            return tk / t0
        return 1.0 + self.draft_cost * k

    def table(self) -> dict[str, float]:
        """Measured ratios, for /metrics: spec_cost_b{lanes}_k{K}."""
        return {f"spec_cost_b{b}_k{k}": round(self.ratio(b, k), 4)
                for (b, k) in sorted(self._sec) if k > 0 and self._timed((b, k)) and self._timed((b, 0))}  # fmt: skip


@dataclass
class AdaptivePolicy:
    k_max: int
    costs: StepCosts
    prior_rate: float = 0.6  # optimistic: a new lane speculates until its own drafts say otherwise
    prior_trials: float = 2.0
    decay: float = 0.8  # weight of the past per round: about the last five rounds count
    probe_every: int = 8
    probe_max: int = 64  # the longest wait between a lane's probes (a multiple of probe_every: probes fall on ticks)

    def new_lane(self) -> LaneAcceptance:
        return LaneAcceptance(self.prior_rate * self.prior_trials, self.prior_trials)

    def observe(self, st: LaneAcceptance, drafted: int, accepted: int) -> None:
        """A judged round (or a shadow probe) of `drafted` drafts with `accepted` of them kept."""
        if drafted <= 0:
            return
        if accepted:  # the lane's drafts pay again: probes back to every probe_every rounds
            st.probe_gap = 0
        st.accepted = self.decay * st.accepted + accepted
        st.trials = self.decay * st.trials + accepted + (1 if accepted < drafted else 0)

    def lane_k(self, st: LaneAcceptance, lanes: int, budget: int) -> int:
        """The lane's own best draft length, given its budget and the cost at this many lanes."""
        ks = range(min(budget, self.k_max) + 1)
        return max(ks, key=lambda k: (expected_tokens(st.rate, k) / self.costs.ratio(lanes, k), -k))

    def choose(self, wants: list[tuple[LaneAcceptance, int]]) -> int:
        """The step's K from each lane's own K: the batch's best tokens per unit of time."""
        if not wants:
            return 0
        n = len(wants)

        def score(k: int) -> float:
            return sum(expected_tokens(st.rate, min(kl, k)) for st, kl in wants) / self.costs.ratio(n, k)

        return max(range(max(kl for _, kl in wants) + 1), key=lambda k: (score(k), -k))

    def probe_due(self, st: LaneAcceptance, drafting: bool, tick: bool = True) -> bool:
        """Counts the lane's rounds without drafts; True once its probe gap (`probe_every` at first, doubled by
        each probe up to `probe_max`, back to `probe_every` when a draft is accepted) has passed, on a `tick` (the
        decoder ticks every `probe_every` steps, so lanes that fell back probe in the same step and share the
        draft's lm_head read), then the count restarts."""
        if drafting:
            st.rounds_since_draft = 0
            return False
        st.rounds_since_draft += 1
        gap = st.probe_gap or self.probe_every
        if st.rounds_since_draft >= gap and tick:
            st.rounds_since_draft = 0
            st.probe_gap = min(2 * gap, self.probe_max)
            return True
        return False
