"""Open-addressing hash tables of int64 keys (linear probing), in compiled loops.

Binary search over millions of sorted keys missed the cache at every step; a probe here
reads one slot, mostly. The vote table's slots are ``[key, votes]``, where votes packs
"closer to the lower id" in the low 32 bits and "closer to the higher id" in the high
32 bits. Capacities are powers of two, and callers keep tables at most half full.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1  # keys are non-negative
_LOW = (1 << 32) - 1


@njit(cache=True, nogil=True)
def capacity_for(n_keys):
    """Power of two, at most half full: linear probing stays short (misses most of all)."""
    capacity = 16
    while capacity < 2 * n_keys + 1:
        capacity *= 2
    return capacity


@njit(cache=True, inline="always")
def _probe(slots, key):
    """The slot holding `key`, or else the empty slot where it belongs."""
    mask = len(slots) - 1
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    slot = np.int64((h ^ (h >> np.uint64(29))) & np.uint64(mask))
    while slots[slot] != key and slots[slot] != EMPTY:
        slot = (slot + 1) & mask
    return slot


@njit(cache=True, nogil=True)
def lookup(table, keys, out_lo, out_hi):
    """Add each key's votes to out_lo/out_hi (left as they are for unknown keys)."""
    slots = table[:, 0]
    for i in range(len(keys)):
        slot = _probe(slots, keys[i])
        if slots[slot] == keys[i]:
            votes = table[slot, 1]
            out_lo[i] += votes & _LOW
            out_hi[i] += votes >> 32


@njit(cache=True, nogil=True)
def insert(table, keys, lo, hi):
    """Add votes per key, creating keys as needed; returns the number of new keys."""
    slots = table[:, 0]
    created = 0
    for i in range(len(keys)):
        slot = _probe(slots, keys[i])
        if slots[slot] == EMPTY:
            slots[slot] = keys[i]
            created += 1
        table[slot, 1] += np.int64(lo[i]) + (np.int64(hi[i]) << 32)
    return created


@njit(cache=True, nogil=True)
def add_to_set(slots, keys):
    """Insert keys into a set; returns the number of new keys. Runs of one key stay in
    cache, so a batch with many repeats is cheap."""
    created = 0
    for i in range(len(keys)):
        slot = _probe(slots, keys[i])
        if slots[slot] == EMPTY:
            slots[slot] = keys[i]
            created += 1
    return created


@njit(cache=True, nogil=True)
def in_set(slots, keys):
    out = np.zeros(len(keys), np.bool_)
    for i in range(len(keys)):
        out[i] = slots[_probe(slots, keys[i])] == keys[i]
    return out


@njit(cache=True, nogil=True)
def first_index(keys):
    """For each key, the index of its first occurrence: ``first_index(k) == arange(len(k))``
    marks the first occurrences. One pass."""
    capacity = 16
    while capacity < 2 * len(keys):
        capacity *= 2
    slots = np.full(capacity, EMPTY, np.int64)
    where = np.empty(capacity, np.int64)
    out = np.empty(len(keys), np.int64)
    for i in range(len(keys)):
        slot = _probe(slots, keys[i])
        if slots[slot] == EMPTY:
            slots[slot] = keys[i]
            where[slot] = i
        out[i] = where[slot]
    return out
