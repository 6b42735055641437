"""The random choices of one serving, drawn before it starts.

A rater's next query comes from the Python scheduler (SQLite, and every case the
PostgreSQL answer function hands back) or from `closer_answer()` (the usual answer on
PostgreSQL). Both take the same `Draws`: whether the rater gets an attention check, a
random triplet or a queue slot, which side the first item is shown on, and a few
candidate triples of distinct items, of which each keeps the first the rater was never
served. Given the same draws and the same rows, the two serve the same query; the
differential test (tests/test_answer_paths.py) holds them to it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np

# Random triples tried for a query the rater was never served, before a full search.
RANDOM_DRAWS = 8
# A serving's 64-bit words: kind, side, the triples' uniforms, the search's seed.
_WORDS = 2 + 3 * RANDOM_DRAWS + 1
_WORD = (1 << 64) - 1
_UNIT = 2.0**-53


def scheduler_random(seed: int | None) -> random.Random:
    """The app's source of draws: seeded for a reproducible run, else the operating
    system's, which no rater can learn to foresee from the sides and checks they were
    shown (as they could a seeded Mersenne Twister's, given enough of them)."""
    return random.Random(seed) if seed is not None else random.SystemRandom()


@dataclass(frozen=True)
class Draws:
    """`kind` below the project's attention rate asks a check, below that plus its
    random share a random triplet, else the queue's first free slot. `picks` are
    uniforms that `candidates` turns into distinct positions among the project's items,
    whatever their number; `search_seed` seeds the full search for an unseen query."""

    kind: float
    left_is_lo: bool
    picks: tuple[tuple[float, float, float], ...]
    search_seed: int
    # The draws of the serving after this one: its query is drawn now, so that the page
    # can load it while the rater answers this one (app/scheduling/upcoming.py).
    ahead: Draws | None = None

    @classmethod
    def roll(cls, rng: random.Random) -> Draws:
        """All of one serving's draws, and those of the serving after it, from one call
        of `rng` (the operating system's source costs a system call per call)."""
        bits = rng.getrandbits(2 * 64 * _WORDS)
        now, ahead = bits & ((1 << (64 * _WORDS)) - 1), bits >> (64 * _WORDS)
        return replace(cls._of(now), ahead=cls._of(ahead))

    @classmethod
    def _of(cls, bits: int) -> Draws:
        words = [(bits >> (64 * at)) & _WORD for at in range(_WORDS)]
        uniforms = [(word >> 11) * _UNIT for word in words[:-1]]  # 53 bits each, in [0, 1)
        picks = tuple(
            (uniforms[at], uniforms[at + 1], uniforms[at + 2])
            for at in range(2, 2 + 3 * RANDOM_DRAWS, 3)
        )
        return cls(uniforms[0], uniforms[1] < 0.5, picks, words[-1] >> 1)

    def candidates(self, item_ids: np.ndarray) -> list[tuple[int, int, int]]:
        """The drawn (anchor, p, q) triples of distinct items, as ids from `item_ids`
        (the project's item ids in ascending order); none below three items."""
        n = len(item_ids)
        if n < 3:
            return []
        triples = []
        for first, second, third in self.picks:
            a = min(int(first * n), n - 1)
            b = min(int(second * (n - 1)), n - 2)
            b += b >= a
            c = min(int(third * (n - 2)), n - 3)
            for taken in sorted((a, b)):
                c += c >= taken
            triples.append((int(item_ids[a]), int(item_ids[b]), int(item_ids[c])))
        return triples

    def search_rng(self) -> random.Random:
        return random.Random(self.search_seed)
