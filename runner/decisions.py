"""Deterministic fault decisions.

Every decision is a published function of the plan's seed, the repetition index, the
fault's position in the plan, the call ordinal (how many matching calls that fault has
seen before this one) and the call's target. So the same plan and seed make the same
decisions on any machine and in any order of parallel workers.

    key     = "mitmchaos/v1|{seed}|{repetition}|{fault_index}|{ordinal}|{target}"
    sampled = int(sha256(key)[:16 hex digits], 16) / 2**64        # uniform in [0, 1)
    applied = sampled < probability

``rng`` derives a seeded ``random.Random`` from the same key, for faults whose effect
itself is random (a latency drawn from a distribution, which fields a corruption hits).
"""

from __future__ import annotations

import hashlib
import random
import secrets

CANARY_PREFIX = "E-CHAOS-"


def decision_key(seed: int, repetition: int, fault_index: int, ordinal: int, target: str) -> str:
    return f"mitmchaos/v1|{seed}|{repetition}|{fault_index}|{ordinal}|{target}"


def sample(seed: int, repetition: int, fault_index: int, ordinal: int, target: str) -> float:
    digest = hashlib.sha256(decision_key(seed, repetition, fault_index, ordinal, target).encode()).hexdigest()
    return int(digest[:16], 16) / 2**64


def rng(seed: int, repetition: int, fault_index: int, ordinal: int, target: str) -> random.Random:
    digest = hashlib.sha256(decision_key(seed, repetition, fault_index, ordinal, target).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def new_canary() -> str:
    """A repetition's canary: a fixed prefix and eight hex digits."""
    return CANARY_PREFIX + secrets.token_hex(4)


def is_canary(text: str) -> bool:
    tail = text[len(CANARY_PREFIX):]
    return text.startswith(CANARY_PREFIX) and len(tail) == 8 and all(c in "0123456789abcdef" for c in tail)
