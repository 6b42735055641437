"""Judgements as the choices a person made, for learners that model the choice itself.

`app/learn/judgements.py` turns a screen into the triplets it implies; this module keeps
what the person chose among. Each choice picks one alternative out of a few, and each
alternative is a pair of items whose similarity the person weighed:

- a triplet ("is the anchor closer to b or to c?") is one choice between the pairs
  (anchor, b) and (anchor, c);
- an odd-one-out of three is one choice among its three pairs: the pair left when the odd
  one is taken out is the most similar;
- a "pick the k most similar to the reference among n" screen is k choices in turn: the
  first pick among all n pairs (reference, item), the second among the n - 1 left, ...

The chosen alternative is always the first; rows shorter than the widest are padded with
-1. Every choice keeps the row of the judgement it came from, so a split can hold a whole
judgement out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from app.learn.judgements import (
    _distinct_rows,
    _int_rows,
    checked_odd_one_out,
    rank_triplets,
)

PAD = -1


@dataclass(frozen=True)
class Choices:
    """`pairs` (c, width, 2): each choice's alternatives as item pairs, the chosen one
    first, PAD past the last; `judgement` (c,): the judgement each choice belongs to."""

    pairs: np.ndarray
    judgement: np.ndarray

    def __post_init__(self) -> None:
        pairs = np.asarray(self.pairs)
        if pairs.ndim != 3 or pairs.shape[2] != 2 or (len(pairs) and pairs.shape[1] < 2):
            raise ValueError(f"pairs must have shape (c, width >= 2, 2); got {pairs.shape}")
        judgement = np.asarray(self.judgement)
        if judgement.shape != (len(pairs),):
            raise ValueError(
                f"judgement must hold one row per choice ({len(pairs)}); got {judgement.shape}"
            )
        object.__setattr__(self, "pairs", pairs.astype(np.int64, copy=False))
        object.__setattr__(self, "judgement", judgement.astype(np.int64, copy=False))

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def n_alternatives(self) -> np.ndarray:
        """How many alternatives each choice had (its pairs before the padding)."""
        return (self.pairs[:, :, 0] != PAD).sum(axis=1)

    @cached_property
    def appearances(self) -> np.ndarray:
        """How many of the pairs name each item (`n_items` long), counted a block at a
        time (16 M choices of eight pairs would otherwise copy 2 GB). Kept: a fit asks
        for it once a candidate, on the same choices."""
        counts = np.zeros(self.n_items, dtype=np.int64)
        block = 1 << 18
        for begin in range(0, len(self), block):
            ids = self.pairs[begin : begin + block].ravel()
            counts += np.bincount(ids[ids >= 0], minlength=len(counts))
        counts.flags.writeable = False  # kept for every later caller
        return counts

    @property
    def n_items(self) -> int:
        """One more than the largest item id named."""
        return int(self.pairs.max()) + 1 if len(self) else 0

    def take(self, rows) -> Choices:
        return Choices(self.pairs[rows], self.judgement[rows])

    @classmethod
    def join(cls, *parts: Choices, renumber: bool = True) -> Choices:
        """Several sets of choices as one, padded to the widest: their judgements
        numbered apart (a judgement of one part never shares a number with another's),
        or, with `renumber=False`, kept as they are (numbers the caller gave)."""
        width = max((part.pairs.shape[1] for part in parts), default=2)
        pairs, judgements, offset = [], [], 0
        for part in parts:
            padded = np.full((len(part), width, 2), PAD, dtype=np.int64)
            padded[:, : part.pairs.shape[1]] = part.pairs
            pairs.append(padded)
            judgements.append(part.judgement + offset)
            if len(part) and renumber:
                offset += int(part.judgement.max()) + 1
        if not pairs:
            return cls(np.empty((0, 2, 2), dtype=np.int64), np.empty(0, dtype=np.int64))
        return cls(np.concatenate(pairs), np.concatenate(judgements))


def triplet_choices(triplets) -> Choices:
    """Triplets (m, 3) ``(anchor, closer, farther)``: one choice each, of the pair
    (anchor, closer) over (anchor, farther)."""
    triplets = _int_rows(triplets, "triplets", 3)
    _distinct_rows(triplets, "triplets")
    anchor = triplets[:, 0]
    pairs = np.stack(
        [np.column_stack([anchor, triplets[:, 1]]), np.column_stack([anchor, triplets[:, 2]])],
        axis=1,
    )
    return Choices(pairs, np.arange(len(triplets)))


def odd_one_out_choices(shown, odd) -> Choices:
    """Odd-one-out judgements: of the three items of each row of `shown` (m, 3), `odd`
    (m,) was chosen as least like the other two, that is, the pair of the other two as
    the most similar of the three pairs."""
    _, odd, pair = checked_odd_one_out(shown, odd)
    first, second = pair.T
    pairs = np.stack(
        [
            np.column_stack([first, second]),
            np.column_stack([first, odd]),
            np.column_stack([second, odd]),
        ],
        axis=1,
    )
    return Choices(pairs, np.arange(len(odd)))


def rank_choices(reference, shown, picks) -> Choices:
    """ "Pick the k most similar to the reference" judgements (as `rank_triplets` takes
    them, and checked the same way): k choices each, the t-th pick chosen among the items
    not picked before it."""
    rank_triplets(reference, shown, picks)  # the same checks, naming the row at fault
    reference = _int_rows(reference, "reference")
    shown = _int_rows(shown, "shown", 0)
    picks = _int_rows(picks, "picks", 0)
    m, n = shown.shape
    k = picks.shape[1]
    picked = (shown[:, :, None] == picks[:, None, :]).any(axis=2)
    order = np.concatenate([picks, shown[~picked].reshape(m, n - k)], axis=1)
    pairs = np.full((m, k, n, 2), PAD, dtype=np.int64)
    for step in range(k):
        left = n - step
        pairs[:, step, :left, 0] = reference[:, None]
        pairs[:, step, :left, 1] = order[:, step:]
    return Choices(pairs.reshape(m * k, n, 2), np.repeat(np.arange(m), k))
