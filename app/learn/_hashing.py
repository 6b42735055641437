"""An open-addressing hash table of query keys with vote counts, in compiled loops.

Binary search over millions of sorted keys missed the cache at every step. Here a probe
reads one 16-byte slot, ``[key, votes]``, where votes packs "closer to the lower id" in
the low 32 bits and "closer to the higher id" in the high 32 bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1  # keys are non-negative
_LOW = (1 << 32) - 1


@njit(cache=True, inline="always")
def _slot(key, capacity):
    """A slot in [0, capacity) for a power-of-two capacity."""
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(29)
    return np.int64(h & np.uint64(capacity - 1))


def capacity_for(n_keys: int) -> int:
    """Power of two, at most half full: linear probing stays short (misses most of all)."""
    return 1 << max(4, int(np.ceil(np.log2(2 * n_keys + 1))))


@njit(cache=True)
def lookup(table, keys, out_lo, out_hi):
    """Add each key's votes to out_lo/out_hi (left as they are for unknown keys)."""
    capacity = len(table)
    for i in range(len(keys)):
        key = keys[i]
        slot = _slot(key, capacity)
        while True:
            found = table[slot, 0]
            if found == key:
                votes = table[slot, 1]
                out_lo[i] += votes & _LOW
                out_hi[i] += votes >> 32
                break
            if found == EMPTY:
                break
            slot = (slot + 1) & (capacity - 1)


@njit(cache=True)
def insert(table, keys, lo, hi):
    """Add votes per key, creating keys as needed; returns the number of new keys.

    The caller keeps the table at most half full, so a free slot is always found.
    """
    capacity = len(table)
    created = 0
    for i in range(len(keys)):
        key = keys[i]
        slot = _slot(key, capacity)
        while True:
            found = table[slot, 0]
            if found == key:
                break
            if found == EMPTY:
                table[slot, 0] = key
                created += 1
                break
            slot = (slot + 1) & (capacity - 1)
        table[slot, 1] += np.int64(lo[i]) + (np.int64(hi[i]) << 32)
    return created


@njit(cache=True)
def first_occurrences(keys):
    """Mask of the first occurrence of each distinct key, in one pass."""
    capacity = 16
    while capacity < 2 * len(keys):
        capacity *= 2
    table = np.full(capacity, EMPTY, np.int64)
    first = np.zeros(len(keys), np.bool_)
    for i in range(len(keys)):
        key = keys[i]
        slot = _slot(key, capacity)
        while True:
            found = table[slot]
            if found == key:
                break
            if found == EMPTY:
                table[slot] = key
                first[i] = True
                break
            slot = (slot + 1) & (capacity - 1)
    return first


@njit(cache=True)
def add_to_set(table, keys):
    """Insert keys into a set table (power-of-two capacity, kept at most half full);
    returns the number of new keys. Repeated keys in a row stay in cache, so cheap."""
    capacity = len(table)
    created = 0
    for i in range(len(keys)):
        key = keys[i]
        slot = _slot(key, capacity)
        while True:
            found = table[slot]
            if found == key:
                break
            if found == EMPTY:
                table[slot] = key
                created += 1
                break
            slot = (slot + 1) & (capacity - 1)
    return created


@njit(cache=True)
def in_set(table, keys):
    capacity = len(table)
    out = np.zeros(len(keys), np.bool_)
    for i in range(len(keys)):
        key = keys[i]
        slot = _slot(key, capacity)
        while True:
            found = table[slot]
            if found == key:
                out[i] = True
                break
            if found == EMPTY:
                break
            slot = (slot + 1) & (capacity - 1)
    return out


@njit(cache=True)
def first_index(keys):
    """For each key, the index of its first occurrence (so `first_index(k) == arange` marks
    the first occurrences), in one pass."""
    capacity = 16
    while capacity < 2 * len(keys):
        capacity *= 2
    table = np.full(capacity, EMPTY, np.int64)
    where = np.empty(capacity, np.int64)
    out = np.empty(len(keys), np.int64)
    for i in range(len(keys)):
        key = keys[i]
        slot = _slot(key, capacity)
        while True:
            found = table[slot]
            if found == key:
                out[i] = where[slot]
                break
            if found == EMPTY:
                table[slot] = key
                where[slot] = i
                out[i] = i
                break
            slot = (slot + 1) & (capacity - 1)
    return out
