"""Compiled per-segment loops of the CompRF build: queries, pivots, partition.

Each node owns the segment ``members[start:end]`` of one flat array; these loops walk
segments directly instead of materialising per-member index arrays in numpy.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def segment_queries(members, items, starts, ends, pivot_left, pivot_right):
    """Queries ``(x, left pivot, right pivot)`` of every non-pivot member, segment by
    segment in order, and the index of the node each belongs to."""
    total = 0
    for node in range(len(starts)):
        total += ends[node] - starts[node] - 2
    queries = np.empty((total, 3), np.int64)
    owner = np.empty(total, np.int64)
    row = 0
    for node in range(len(starts)):
        left, right = pivot_left[node], pivot_right[node]
        for position in range(starts[node], ends[node]):
            item = items[members[position]]
            if item != left and item != right:
                queries[row, 0] = item
                queries[row, 1] = left
                queries[row, 2] = right
                owner[row] = node
                row += 1
    return queries, owner


@njit(cache=True, nogil=True)
def choose_pivots(members, items, labels, n_classes, supervised, starts, ends, u1, u2):
    """Two distinct pivots per node; where labels differ (supervised), a uniformly random
    pair with different labels: the first weighted by its differently labelled partners."""
    first = np.empty(len(starts), np.int64)
    second = np.empty(len(starts), np.int64)
    counts = np.zeros(max(n_classes, 1), np.int64)
    for node in range(len(starts)):
        start, end = starts[node], ends[node]
        size = end - start
        mixed = False
        if supervised:
            counts[:] = 0
            for position in range(start, end):
                counts[labels[members[position]]] += 1
            total = 0
            for position in range(start, end):
                total += size - counts[labels[members[position]]]
            mixed = total > 0
        if mixed:
            target = np.int64(np.floor(u1[node] * total))
            seen = 0
            chosen = end - 1
            for position in range(start, end):
                seen += size - counts[labels[members[position]]]
                if seen > target:
                    chosen = position
                    break
            first_label = labels[members[chosen]]
            others = size - counts[first_label]
            target = np.int64(np.floor(u2[node] * others))
            seen = 0
            other = end - 1
            for position in range(start, end):
                if labels[members[position]] != first_label:
                    seen += 1
                    if seen > target:
                        other = position
                        break
            first[node], second[node] = chosen, other
        else:
            one = np.int64(np.floor(u1[node] * size))
            two = np.int64(np.floor(u2[node] * (size - 1)))
            if two >= one:
                two += 1
            first[node], second[node] = start + one, start + two
    left = np.empty(len(starts), np.int64)
    right = np.empty(len(starts), np.int64)
    for node in range(len(starts)):
        left[node] = items[members[first[node]]]
        right[node] = items[members[second[node]]]
    return left, right


@njit(cache=True, nogil=True)
def partition(members, items, starts, ends, pivot_left, pivot_right, complete, lower_closer):
    """Stable partition of each complete node's segment: left side first.

    `lower_closer` answers the queries of `segment_queries` over the same nodes, in the
    same order. Returns how many members go left in each node.
    """
    n_left = np.zeros(len(starts), np.int64)
    buffer = np.empty(0, members.dtype)
    row = 0
    for node in range(len(starts)):
        start, end = starts[node], ends[node]
        left, right = pivot_left[node], pivot_right[node]
        if not complete[node]:
            row += end - start - 2
            continue
        size = end - start
        if len(buffer) < size:
            buffer = np.empty(2 * size, members.dtype)
        lefts = 0
        rights = 0
        left_is_lower = left < right
        for position in range(start, end):
            member = members[position]
            item = items[member]
            if item == left:
                go_left = True
            elif item == right:
                go_left = False
            else:
                go_left = lower_closer[row] == left_is_lower
                row += 1
            if go_left:
                members[start + lefts] = member
                lefts += 1
            else:
                buffer[rights] = member
                rights += 1
        for index in range(rights):
            members[start + lefts + index] = buffer[index]
        n_left[node] = lefts
    return n_left
