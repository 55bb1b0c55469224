"""Statistics for non-deterministic agents: Wilson intervals, runs needed, pass^k.

A probe's pass rate over n repetitions is a binomial proportion. The Wilson score interval
stays inside [0, 1] and behaves at 0 and n passes, where the normal approximation claims
certainty it does not have. Thresholds of 1.0 (and 0) are decided exactly: one failure is a
weakness, all passes is the strongest evidence there is; no interval can do better.
"""

from __future__ import annotations

import math
from statistics import NormalDist

# Above this many runs a question is not worth answering with repetitions.
MAX_RUNS = 1_000_000


def z_value(confidence: float) -> float:
    """The two-sided normal quantile for a confidence level (0.95 -> 1.95996...)."""
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson(passes: int, runs: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval (low, high) for ``passes`` out of ``runs``; (0, 1) for no runs."""
    if runs == 0:
        return 0.0, 1.0
    z = z_value(confidence)
    p = passes / runs
    denom = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / denom
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / denom
    # Exact at the ends: the formula gives 1 - 1e-16 for all passes.
    low = 0.0 if passes == 0 else max(0.0, centre - half)
    high = 1.0 if passes == runs else min(1.0, centre + half)
    return low, high


def decided_exactly(threshold: float) -> bool:
    """Thresholds no interval can settle better than the raw count does."""
    return threshold >= 1.0 or threshold <= 0.0


def runs_needed(threshold: float, confidence: float = 0.95) -> int | None:
    """How many all-pass runs it takes for the Wilson lower bound to reach ``threshold``.

    All n passes give a lower bound of n / (n + z²), so n ≥ t·z² / (1 − t). None for a
    threshold of 1.0, which no finite run can show by interval (it is decided exactly).
    """
    if threshold >= 1.0:
        return None
    if threshold <= 0.0:
        return 1
    z2 = z_value(confidence) ** 2
    n = max(1, math.ceil(threshold * z2 / (1 - threshold) - 1e-9))
    while wilson(n, n, confidence)[0] < threshold:  # guard the ceil against rounding
        n += 1
    return n


def runs_to_settle(passes: int, runs: int, threshold: float, confidence: float = 0.95) -> int | None:
    """Roughly how many runs, at the observed rate, would put the interval clear of ``threshold``.

    None when the observed rate sits on the threshold (no number of runs settles it) or it
    would take more than ``MAX_RUNS``.
    """
    if runs == 0:
        return runs_needed(threshold, confidence)
    rate = passes / runs
    if math.isclose(rate, threshold):
        return None

    def settled(n: int) -> bool:
        low, high = wilson(round(rate * n), n, confidence)
        return low >= threshold if rate > threshold else high < threshold

    if settled(runs):
        return runs
    hi = runs
    while not settled(hi):
        hi *= 2
        if hi > MAX_RUNS:
            return None
    lo = hi // 2
    while lo + 1 < hi:  # settled() is monotone in n at a fixed rate, up to rounding of passes
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if settled(mid) else (mid, hi)
    return hi


def pass_hat_k(passes: int, runs: int, k: int) -> float | None:
    """The unbiased estimate of pass^k, the chance that k fresh runs all pass: C(c,k) / C(n,k)."""
    if k < 1 or k > runs:
        return None
    return math.comb(passes, k) / math.comb(runs, k)


def percent_floor(x: float) -> int:
    """A whole percent rounded down; 0% and 100% only when exact ("100%" means every run passed)."""
    return max(1, math.floor(x * 100 + 1e-9)) if x > 0 else 0


def percent_ceil(x: float) -> int:
    """A whole percent rounded up; 0% and 100% only when exact."""
    return min(99, math.ceil(x * 100 - 1e-9)) if x < 1 else 100


def interval_text(passes: int, runs: int, confidence: float) -> str:
    """``29/40 (72%, 95% CI 57%-84%)``: the rate and the interval rounded outward, never overstated."""
    if runs == 0:
        return "0/0 (not evaluated)"
    low, high = wilson(passes, runs, confidence)
    return (f"{passes}/{runs} ({percent_floor(passes / runs)}%, {confidence * 100:g}% CI "
            f"{percent_floor(low)}%-{percent_ceil(high)}%)")
