"""CompRF: comparison-based random forests that ask for exactly the triplets they need.

A comparison tree splits a node by two pivots: every other member x is asked "is x closer
to the left pivot or to the right one?" (ALGORITHMS.md §1, Algorithms 1-2 of the paper).
Answers come from people over hours, so the build is a resumable state machine:
`CompRFBuilder` lists the queries it still needs, takes answers in any order and in any
batches, splits each node once all of its answers are in, and can be saved and resumed
at any point. `CompRF` is the scikit-learn face for when an oracle answers at once.

All trees advance together: the open nodes of every tree are handled in one vectorised
pass, so the bookkeeping costs microseconds per node, never a Python loop per node.
Each node draws its pivots from a hash of its own key (and a child's key from its
parent's), so the forest depends on the answers only, not on the order they arrived in.
"""

from __future__ import annotations

import io
import json
import zipfile
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import (
    Interval,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils.validation import check_is_fitted

from app.learn import _comprf_kernels as _kernels
from app.learn import _hashing
from app.learn.keys import ID_BITS, ID_MASK, MAX_ITEMS, query_keys
from app.learn.subtrees import expected_subtree_queries
from app.learn.triplets import check_triplets

_PAIR_MASK = (1 << (2 * ID_BITS)) - 1  # the (lower, higher) pivot part of a query key
OPEN, SPLIT, LEAF = 0, 1, 2
_LEFT_SALT = np.uint64(0x5851F42D4C957F2D)
_RIGHT_SALT = np.uint64(0x14057B7EF767814F)
_TREE_SALT = np.uint64(0x2545F4914F6CDD1D)
TASKS = ("classification", "regression")
_HASHES = {"store_keys"}  # saved without compression (see to_bytes)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a fast, well-spread hash of 64-bit words."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _uniform(keys: np.ndarray, stream: int) -> np.ndarray:
    """A uniform number in [0, 1) per node key; `stream` gives independent draws."""
    return (_mix(keys ^ np.uint64(stream * 0xD1B54A32D192ED03 & (2**64 - 1))) >> np.uint64(11)) * (
        1.0 / (1 << 53)
    )


class AnswerStore:
    """Votes per query, keyed by `query_keys`, in an open-addressing hash table.

    A query is decided once it holds `answers_per_query` answers and they are not tied.
    """

    def __init__(self, answers_per_query: int = 1, capacity: int = 1024) -> None:
        self.answers_per_query = answers_per_query
        self._count = 0
        self._allocate(capacity)
        # Pivot pairs any answer mentions: a node whose pair is new has no answers yet,
        # so looking up its queries (all misses) can be skipped.
        self._pairs = np.full(1024, _hashing.EMPTY, np.int64)
        self._pair_count = 0

    def _allocate(self, capacity: int) -> None:
        self._table = np.zeros((capacity, 2), np.int64)
        self._table[:, 0] = _hashing.EMPTY

    def __len__(self) -> int:
        return self._count

    def reserve(self, n_queries: int) -> None:
        """Make room for about `n_queries` distinct queries at once (no repeated regrowth)."""
        if _hashing.capacity_for(n_queries) > len(self._table):
            old = self._entries()
            # Grow by half again at least, so a run of small batches regrows rarely.
            self._allocate(_hashing.capacity_for(n_queries))
            _hashing.insert(self._table, *old)

    def _insert(self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        self.reserve(self._count + len(keys))
        self._count += _hashing.insert(self._table, keys, lo, hi)

    def _entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys, votes = self._table[self._table[:, 0] != _hashing.EMPTY].T
        # (a row of the transpose is strided: contiguous, the regrowth's insert is the
        # kernel type every insert uses, not one compiled anew mid-build)
        return np.ascontiguousarray(keys), votes & 0xFFFFFFFF, votes >> 32

    def add(self, triplets: np.ndarray) -> None:
        """Record answers ``(anchor, closer, farther)``."""
        if len(triplets) == 0:
            return
        anchor, closer, farther = triplets.T
        lower_closer = (closer < farther).astype(np.int64)
        keys = query_keys(anchor, closer, farther)
        self._insert(keys, lower_closer, 1 - lower_closer)
        self._add_pairs(keys & _PAIR_MASK)

    def _add_pairs(self, pairs: np.ndarray) -> None:
        if _hashing.capacity_for(self._pair_count + len(pairs)) > len(self._pairs):
            # Bound the set by its distinct pairs, not by this batch's repeats.
            pairs = pairs[_hashing.first_index(pairs) == np.arange(len(pairs))]
            needed = _hashing.capacity_for(self._pair_count + len(pairs))
            if needed > len(self._pairs):
                old = self._pairs[self._pairs != _hashing.EMPTY]
                self._pairs = np.full(needed, _hashing.EMPTY, np.int64)
                _hashing.add_to_set(self._pairs, old)
        self._pair_count += _hashing.add_to_set(self._pairs, pairs)

    def pairs_seen(self, pairs: np.ndarray) -> np.ndarray:
        """Whether any answer so far was about each pivot pair (`query_keys` with anchor 0)."""
        return _hashing.in_set(self._pairs, np.ascontiguousarray(pairs))

    def votes(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Votes for 'closer to the lower id' and 'closer to the higher id' per key."""
        lo = np.zeros(len(keys), np.int64)
        hi = np.zeros(len(keys), np.int64)
        _hashing.lookup(self._table, np.ascontiguousarray(keys), lo, hi)
        return lo, hi

    def triplets(self) -> np.ndarray:
        """The majority answer of every query held, as ``(anchor, closer, farther)`` rows
        (ties are left out): what passive learners train on."""
        keys, lo, hi = self._entries()
        keep = lo != hi
        keys, lower_closer = keys[keep], lo[keep] > hi[keep]
        anchor, lower, higher = keys >> (2 * ID_BITS), (keys >> ID_BITS) & ID_MASK, keys & ID_MASK
        return np.stack(
            [anchor, np.where(lower_closer, lower, higher), np.where(lower_closer, higher, lower)],
            axis=1,
        )

    def state(self) -> dict[str, np.ndarray]:
        keys, lo, hi = self._entries()
        # Votes are small counts: saved in the narrowest signed type that holds them.
        votes = np.promote_types(
            np.min_scalar_type(-int(lo.max(initial=0)) - 1),
            np.min_scalar_type(-int(hi.max(initial=0)) - 1),
        )
        return {"store_keys": keys, "store_lo": lo.astype(votes), "store_hi": hi.astype(votes)}

    @classmethod
    def from_state(cls, answers_per_query: int, state) -> AnswerStore:
        store = cls(answers_per_query)
        keys = np.asarray(state["store_keys"])
        lo = np.asarray(state["store_lo"], dtype=np.int64)
        store._insert(keys, lo, np.asarray(state["store_hi"], dtype=np.int64))
        store._add_pairs(keys & _PAIR_MASK)
        return store


def _positions_among(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where `keys` holds any of the `wanted` keys (one pass over `keys`)."""
    wanted = np.ascontiguousarray(wanted, dtype=np.int64)
    slots = np.full(_hashing.capacity_for(len(wanted)), _hashing.EMPTY, np.int64)
    _hashing.add_to_set(slots, wanted)
    return np.flatnonzero(_hashing.in_set(slots, keys))


def decided_from_votes(lo, hi, answers_per_query: int):
    return (lo.astype(np.int64) + hi >= answers_per_query) & (lo != hi), lo > hi


def needed_from_votes(lo, hi, answers_per_query: int) -> np.ndarray:
    """Answers each query still needs: up to `answers_per_query`, then one per tie."""
    total = lo.astype(np.int64) + hi
    return np.where(
        total < answers_per_query, answers_per_query - total, (lo == hi).astype(np.int64)
    )


def _distinct(queries: np.ndarray, keys: np.ndarray, needed: np.ndarray, return_needed: bool):
    """The queries still needing answers, each once (one query can wait in several trees)."""
    waiting = np.flatnonzero(needed > 0)
    waiting = waiting[_hashing.first_index(keys[waiting]) == np.arange(len(waiting))]
    return (queries[waiting], needed[waiting]) if return_needed else queries[waiting]


class _Nodes:
    """The nodes of all trees as growable parallel arrays."""

    FIELDS = {
        "tree": np.int32,
        "start": np.int64,
        "end": np.int64,
        "depth": np.int32,
        "key": np.uint64,
        "status": np.int8,
        "pivot_left": np.int64,
        "pivot_right": np.int64,
        "left": np.int64,
        "right": np.int64,
    }

    def __init__(self, capacity: int = 1024) -> None:
        self.count = 0
        self.arrays = {name: np.empty(capacity, dtype) for name, dtype in self.FIELDS.items()}

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def append(self, **fields: np.ndarray) -> np.ndarray:
        size = len(fields["tree"])
        needed = self.count + size
        capacity = len(self.arrays["tree"])
        if needed > capacity:
            capacity = max(needed, 2 * capacity)
            for name, array in self.arrays.items():
                grown = np.empty(capacity, array.dtype)
                grown[: self.count] = array[: self.count]
                self.arrays[name] = grown
        ids = np.arange(self.count, needed)
        defaults = {"status": OPEN, "pivot_left": -1, "pivot_right": -1, "left": -1, "right": -1}
        for name, array in self.arrays.items():
            array[self.count : needed] = fields.get(name, defaults.get(name, 0))
        self.count = needed
        return ids

    def state(self) -> dict[str, np.ndarray]:
        return {f"node_{name}": array[: self.count] for name, array in self.arrays.items()}

    @classmethod
    def from_state(cls, state) -> _Nodes:
        nodes = cls(capacity=0)
        nodes.arrays = {
            name: np.array(state[f"node_{name}"], dtype=dtype) for name, dtype in cls.FIELDS.items()
        }
        nodes.count = len(nodes.arrays["tree"])
        return nodes


def _segments(start: np.ndarray, end: np.ndarray):
    """Positions of the member segments [start, end) laid end to end, with each one's owner."""
    sizes = end - start
    offsets = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    owner = np.repeat(np.arange(len(sizes)), sizes)
    positions = np.arange(int(sizes.sum()), dtype=np.int64) - offsets[owner] + start[owner]
    return positions, owner, offsets, sizes


_PARAM_NAMES = ("n_trees", "leaf_size", "subsample", "supervised", "task", "answers_per_query")


# What a CompRF build takes: checked once, by scikit-learn's machinery, for the estimator
# and for a build made or loaded without one.
_BUILD_CONSTRAINTS: dict = {
    "n_trees": [Interval(Integral, 1, None, closed="left")],
    "leaf_size": [Interval(Integral, 1, None, closed="left")],
    "subsample": [Interval(Real, 0, 1, closed="right")],
    "supervised": ["boolean"],
    "task": [StrOptions(set(TASKS))],
    "answers_per_query": [Interval(Integral, 1, None, closed="left")],
}


def _check_params(**params) -> None:
    validate_parameter_constraints(_BUILD_CONSTRAINTS, params, caller_name="CompRF")


def _check_items(items, name: str = "items") -> np.ndarray:
    array = np.asarray(items)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array of item ids; got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer item ids; got dtype {array.dtype}")
    array = array.astype(np.int64)
    if array.size and (array.min() < 0 or array.max() >= MAX_ITEMS):
        raise ValueError(f"{name} must be ids in 0..{MAX_ITEMS - 1}")
    return array


class CompRFBuilder:
    """A CompRF build that advances as answers arrive, in any order and in any batches.

    ``pending_queries()`` lists the queries ``(x, left pivot, right pivot)`` the open
    nodes still need; ``add_answers(triplets)`` records answers (for any query; those not
    asked now are kept and reused when a node asks them); nodes split as soon as all
    their answers are in. ``to_bytes()`` / ``from_bytes()`` save and resume it exactly.
    Once ``is_complete``, ``forest()`` gives the fitted `CompRF`.
    """

    params: dict[str, Any]
    classes: np.ndarray | None
    # Caches of the open nodes' queries, each valid until answers or splits change them.
    _pending_cache: Any
    _query_cache: Any
    _issued: Any

    def __init__(
        self,
        items,
        y,
        *,
        n_trees: int = 100,
        leaf_size: int = 1,
        subsample: float = 1.0,
        supervised: bool = True,
        task: str = "classification",
        answers_per_query: int = 1,
        random_state=None,
    ) -> None:
        _check_params(
            n_trees=n_trees,
            leaf_size=leaf_size,
            subsample=subsample,
            supervised=supervised,
            task=task,
            answers_per_query=answers_per_query,
        )
        self.params = {
            "n_trees": int(n_trees),
            "leaf_size": int(leaf_size),
            "subsample": float(subsample),
            "supervised": bool(supervised),
            "task": task,
            "answers_per_query": int(answers_per_query),
        }
        self.items = _check_items(items)
        if len(self.items) < 2:
            raise ValueError(f"items must hold at least 2 items; got {len(self.items)}")
        if len(np.unique(self.items)) != len(self.items):
            raise ValueError("items must not repeat an id")
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != len(self.items):
            raise ValueError(
                f"y must be 1-d with one label per item ({len(self.items)}); got shape {y.shape}"
            )
        if task == "classification":
            self.classes, codes = np.unique(y, return_inverse=True)
            self.y = codes.astype(np.int64)
        else:
            if y.dtype.kind not in "iuf":
                raise ValueError(f"y must be numeric for regression; got dtype {y.dtype}")
            self.classes = None
            self.y = y.astype(np.float64)
            if not np.all(np.isfinite(self.y)):
                raise ValueError("y contains NaN or infinite values")
        self.random_state = random_state if isinstance(random_state, Integral) else None
        seed = int(check_random_state(random_state).randint(0, 2**63 - 1, dtype=np.int64))
        self.seed = seed
        self._plant()

    def _plant(self) -> None:
        """Roots for every tree and no answers: the state before the first answer."""
        n, n_trees, subsample = len(self.items), self.params["n_trees"], self.params["subsample"]
        size = n if subsample == 1 else max(2, int(round(subsample * n)))
        # Splits reorder each node's members in place, so they are drawn anew here.
        self.members = np.concatenate(
            [
                np.random.default_rng([self.seed, tree]).permutation(n)[:size]
                for tree in range(n_trees)
            ]
        ).astype(np.int64)
        self.store = AnswerStore(self.params["answers_per_query"])
        self._pending_cache = None
        self._query_cache = None
        self._issued = None
        self.nodes = _Nodes()
        trees = np.arange(n_trees)
        self.roots = self.nodes.append(
            tree=trees,
            start=trees * size,
            end=(trees + 1) * size,
            depth=np.zeros(n_trees),
            key=_mix(np.uint64(self.seed) ^ (trees.astype(np.uint64) * _TREE_SALT)),
        )
        self._open(self.roots)

    def restarted(self) -> CompRFBuilder:
        """The same build (items, labels, seed, parameters) with no answers: replaying a
        subset of the answers into it gives the forest those answers alone would give."""
        fresh = self.__class__.__new__(self.__class__)
        fresh.params = dict(self.params)
        fresh.items, fresh.y, fresh.classes = self.items, self.y, self.classes
        fresh.random_state, fresh.seed = self.random_state, self.seed
        fresh._plant()
        return fresh

    # -- the public face -------------------------------------------------------------

    @property
    def is_complete(self) -> bool:
        return not np.any(self.nodes.status[: self.nodes.count] == OPEN)

    @property
    def n_queries(self) -> int:
        """Distinct queries answered so far."""
        return len(self.store)

    def pending_queries(self, return_needed: bool = False):
        """Distinct ``(x, left pivot, right pivot)`` queries the open nodes are waiting for;
        with ``return_needed``, also how many more answers each needs."""
        open_nodes, queries, needed, chosen, issued = self._pending()
        # With one answer per query and no votes yet on the waiting ones, a batch that
        # answers this list row by row gives every vote: no lookups (see add_answers).
        self._issued = issued
        return (queries[chosen], needed[chosen]) if return_needed else queries[chosen]

    def pending_about(self, keys):
        """The queries with these `query_keys` that open nodes ask, each once, and how
        many more answers each needs (0: none): what answers about `keys` changed while
        no node split. One pass over the open queries, where `pending_queries` also
        counts and orders them all."""
        open_nodes = self._open_nodes()
        queries, _ = self._open_queries(open_nodes)
        cached = self._cached_pending(open_nodes)
        asked = cached[0] if cached is not None else query_keys(*queries.T)
        hit = _positions_among(asked, keys)
        hit = hit[_hashing.first_index(asked[hit]) == np.arange(len(hit))]
        lo, hi = self.store.votes(asked[hit])
        return queries[hit], needed_from_votes(lo, hi, self.params["answers_per_query"])

    def _cached_pending(self, open_nodes: np.ndarray):
        """The open nodes' query keys and votes as last looked up, `(keys, lo, hi)`, if
        the open nodes are still the same; else None."""
        cached = self._pending_cache
        if cached is not None and np.array_equal(cached[0], open_nodes):
            return cached[1:]
        return None

    def _pending(self):
        """The open nodes' queries, how many answers each needs, which to ask (each
        distinct waiting query once), and the issued-list record when it applies."""
        open_nodes = self._open_nodes()
        queries, query_owner = self._open_queries(open_nodes)
        cached = self._cached_pending(open_nodes)
        if cached is not None:
            keys, lo, hi = cached
        else:
            keys = query_keys(*queries.T)
            lo, hi = self._votes(open_nodes, query_owner, keys)
        needed = needed_from_votes(lo, hi, self.params["answers_per_query"])
        # One query waits in several nodes only if they share their pair of pivots, so
        # only those nodes' queries are checked for repeats.
        first = np.arange(len(keys))
        pairs = query_keys(
            np.zeros(len(open_nodes), np.int64),
            self.nodes.pivot_left[open_nodes],
            self.nodes.pivot_right[open_nodes],
        )
        pair_first = _hashing.first_index(pairs)
        shared = np.bincount(pair_first, minlength=len(pairs))[pair_first] > 1
        if shared.any():
            repeatable = np.flatnonzero(shared[query_owner])
            first[repeatable] = repeatable[_hashing.first_index(keys[repeatable])]
        waiting = needed > 0
        chosen = (first == np.arange(len(keys))) & waiting
        issued = None
        if self.params["answers_per_query"] == 1 and not np.any(waiting & (lo + hi > 0)):
            index_of = np.where(waiting, (np.cumsum(chosen) - 1)[first], -1)
            issued = (open_nodes, queries[chosen], index_of, lo, hi)
        return open_nodes, queries, needed, chosen, issued

    def add_answers(self, triplets) -> int:
        """Record answers ``(x, closer, farther)``; returns how many nodes split as a result."""
        triplets = check_triplets(triplets, MAX_ITEMS, name="answers")
        answered_in_order = self._answers_issued_list(triplets)
        open_nodes = self._open_nodes()
        cached = self._cached_pending(open_nodes)
        self.store.add(triplets)
        self._pending_cache = None
        if cached is not None and not answered_in_order:
            # Only the queries these answers are about have new votes: at 50,000 items the
            # open roots ask a million queries, and looking all of them up again took
            # most of a build step.
            keys, lo, hi = cached
            changed = _positions_among(keys, query_keys(*triplets.T))
            lo, hi = lo.copy(), hi.copy()
            lo[changed], hi[changed] = self.store.votes(keys[changed])
            count, children = self._split_completed(open_nodes, votes=(lo, hi), keys=keys)
        elif answered_in_order:
            _, _, index_of, lo, hi = self._issued
            self._issued = None
            lower_closer = (triplets[:, 1] < triplets[:, 2]).astype(np.int64)
            answered = index_of >= 0
            lo, hi = lo.copy(), hi.copy()
            lo[answered] = lower_closer[index_of[answered]]
            hi[answered] = 1 - lo[answered]
            count, children = self._split_completed(open_nodes, votes=(lo, hi))
        else:
            self._issued = None
            count, children = self._split_completed(open_nodes)
        return count + self._open(children)

    def _answers_issued_list(self, triplets: np.ndarray) -> bool:
        """Whether `triplets` answer the last issued pending list exactly, row by row."""
        if self._issued is None:
            return False
        open_nodes, queries = self._issued[:2]
        if len(triplets) != len(queries) or not np.array_equal(open_nodes, self._open_nodes()):
            return False
        closer, farther = triplets[:, 1], triplets[:, 2]
        p, q = queries[:, 1], queries[:, 2]
        return bool(
            np.all(triplets[:, 0] == queries[:, 0])
            and np.all(((closer == p) & (farther == q)) | ((closer == q) & (farther == p)))
        )

    def progress(self) -> dict:
        """How far the build is: per tree, the share of its items already in leaves."""
        count = self.nodes.count
        status = self.nodes.status[:count]
        sizes = self.nodes.end[:count] - self.nodes.start[:count]
        trees = self.nodes.tree[:count]
        tree_size = sizes[self.roots]
        in_leaves = np.bincount(
            trees[status == LEAF], weights=sizes[status == LEAF], minlength=self.params["n_trees"]
        )
        pending = self._pending()
        open_nodes = pending[0]
        # The open nodes' own answers are known exactly; their children's are expected.
        children = expected_subtree_queries(sizes[open_nodes], self.params["leaf_size"]) - (
            sizes[open_nodes] - 2
        )
        answers_left = int(pending[2][pending[3]].sum()) + int(
            round(self.params["answers_per_query"] * np.clip(children, 0, None).sum())
        )
        return {
            "queries_answered": self.n_queries,
            "queries_pending": int(pending[3].sum()),
            "answers_needed_estimate": answers_left,
            "nodes_open": int(np.sum(status == OPEN)),
            "nodes_done": int(np.sum(status != OPEN)),
            "tree_done_share": (in_leaves / tree_size).tolist(),
            "done_share": float(in_leaves.sum() / tree_size.sum()),
        }

    def forest(self) -> CompRF:
        if not self.is_complete:
            raise ValueError("the build is not complete: answer its pending queries first")
        model = CompRF(**self.params, random_state=self.random_state)
        model._set_fitted(self)
        return model

    def to_bytes(self) -> bytes:
        meta = {
            "params": self.params,
            "seed": self.seed,
            "random_state": self.random_state,
            "classes": None if self.classes is None else self.classes.tolist(),
        }
        arrays = {
            "meta": np.frombuffer(json.dumps(meta).encode(), np.uint8),
            "items": self.items,
            "y": self.y,
            "members": self.members,
            "roots": self.roots,
            **self.nodes.state(),
            **self.store.state(),
        }
        buffer = io.BytesIO()
        # An npz file as np.savez_compressed writes it, but quicker: at 5 M answers its
        # deflate took 3.9 s a save. Query keys are hashes that do not compress, so they
        # are stored as they are; the rest is deflated at the fastest level.
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, array in arrays.items():
                raw = io.BytesIO()
                np.lib.format.write_array(raw, np.ascontiguousarray(array), allow_pickle=False)
                # A fixed date: the same build saves the same bytes.
                entry = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                archive.writestr(
                    entry,
                    raw.getbuffer(),
                    compress_type=zipfile.ZIP_STORED if name in _HASHES else zipfile.ZIP_DEFLATED,
                    compresslevel=1,
                )
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> CompRFBuilder:
        with np.load(io.BytesIO(data), allow_pickle=False) as state:
            return cls._from_arrays(state)

    @classmethod
    def _from_arrays(cls, state) -> CompRFBuilder:
        """The builder from its saved arrays (an npz file, or a dict of its arrays)."""
        meta = json.loads(state["meta"].tobytes())
        builder = cls.__new__(cls)
        builder.params = meta["params"]
        builder.seed = meta["seed"]
        builder.random_state = meta["random_state"]
        builder.classes = None if meta["classes"] is None else np.asarray(meta["classes"])
        builder.items, builder.y = state["items"], state["y"]
        builder.members, builder.roots = np.array(state["members"]), state["roots"]
        builder.nodes = _Nodes.from_state(state)
        builder.store = AnswerStore.from_state(meta["params"]["answers_per_query"], state)
        builder._pending_cache = None
        builder._query_cache = None
        builder._issued = None
        return builder

    @staticmethod
    def max_state_bytes(n_items: int, n_trees: int, n_answers: int, label_bytes: int = 600) -> int:
        """The most bytes a saved state of a build over `n_items` items and `n_trees` trees
        that has read `n_answers` answers unpacks to: its members, at most 2n - 1 nodes a
        tree, a vote count per answer, its labels (up to `label_bytes` each)."""
        node_bytes = sum(np.dtype(dtype).itemsize for dtype in _Nodes.FIELDS.values())
        members = n_trees * n_items * 8
        return (
            members
            + 2 * members // 8 * node_bytes
            + 24 * n_answers
            + n_items * label_bytes
            + (1 << 16)
        )

    @classmethod
    def from_untrusted_bytes(cls, data: bytes, *, max_bytes: int) -> CompRFBuilder:
        """`from_bytes` for a state that comes from elsewhere (a project archive):
        ValueError, saying what is wrong, unless it is a whole and consistent state whose
        arrays unpack to at most `max_bytes`. A forged state could otherwise make the
        compiled kernels read outside their arrays, or a node be its own descendant."""
        arrays = _checked_state_arrays(data, max_bytes)
        try:
            builder = cls._from_arrays(arrays)
        except (KeyError, ValueError, TypeError, AttributeError, RecursionError) as error:
            raise ValueError(f"the state cannot be read: {error}") from None
        _check_state_consistent(builder)
        return builder

    # -- the machinery ----------------------------------------------------------------

    def _open_nodes(self) -> np.ndarray:
        return np.flatnonzero(self.nodes.status[: self.nodes.count] == OPEN)

    def _open(self, nodes: np.ndarray) -> int:
        """Make new nodes leaves or give them pivots, then split, level after level, every
        node whose answers are already held; returns how many nodes split."""
        splits = 0
        while len(nodes):
            sizes = self.nodes.end[nodes] - self.nodes.start[nodes]
            small = sizes <= self.params["leaf_size"]
            self.nodes.status[nodes[small]] = LEAF
            nodes = nodes[~small]
            if len(nodes) == 0:
                break
            self._choose_pivots(nodes)
            count, nodes = self._split_completed(nodes)
            splits += count
        return splits

    def _choose_pivots(self, nodes: np.ndarray) -> None:
        keys = self.nodes.key[nodes]
        supervised = self.params["supervised"] and self.params["task"] == "classification"
        labels = self.y if supervised else np.zeros(len(self.y), np.int64)
        n_classes = len(self.classes) if supervised and self.classes is not None else 1
        left, right = _kernels.choose_pivots(
            self.members,
            self.items,
            labels,
            n_classes,
            supervised,
            self.nodes.start[nodes],
            self.nodes.end[nodes],
            _uniform(keys, 1),
            _uniform(keys, 2),
        )
        self.nodes.pivot_left[nodes] = left
        self.nodes.pivot_right[nodes] = right

    def _open_queries(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Queries of the open `nodes` (segment by segment) and the node index of each.

        Open nodes' members do not move until they split, so the arrays for the same node
        set are reused (each round expands the frontier once instead of twice).
        """
        cached = self._query_cache
        if cached is not None and np.array_equal(cached[0], nodes):
            return cached[1]
        result = _kernels.segment_queries(
            self.members,
            self.items,
            self.nodes.start[nodes],
            self.nodes.end[nodes],
            self.nodes.pivot_left[nodes],
            self.nodes.pivot_right[nodes],
        )
        self._query_cache = (nodes, result)
        return result

    def _votes(self, nodes: np.ndarray, query_owner: np.ndarray, keys: np.ndarray):
        """Votes for the queries of `nodes`, looking up only nodes whose pivot pair any
        answer has mentioned: the others cannot have answers yet."""
        lo = np.zeros(len(keys), np.int64)
        hi = np.zeros(len(keys), np.int64)
        pairs_known = self.store.pairs_seen(
            query_keys(
                np.zeros(len(nodes), np.int64),
                self.nodes.pivot_left[nodes],
                self.nodes.pivot_right[nodes],
            )
        )
        if pairs_known.all():
            return self.store.votes(keys)
        known = pairs_known[query_owner]
        if known.any():
            lo[known], hi[known] = self.store.votes(keys[known])
        return lo, hi

    def _split_completed(
        self, candidates: np.ndarray, votes=None, keys=None
    ) -> tuple[int, np.ndarray]:
        """Split every candidate node whose answers are all decided; returns how many, and
        the children (not yet opened).

        `votes` (for the lower and the higher id, per query of the candidates) and their
        `keys` may be given when the caller knows them, sparing the lookups.
        """
        if len(candidates) == 0:
            return 0, candidates
        queries, query_owner = self._open_queries(candidates)
        if keys is None:
            keys = query_keys(*queries.T)
        k = self.params["answers_per_query"]
        lo, hi = votes if votes is not None else self._votes(candidates, query_owner, keys)
        decided, lower_closer = decided_from_votes(lo, hi, k)
        undecided = np.bincount(query_owner[~decided], minlength=len(candidates))
        complete = undecided == 0
        if not complete.any():
            # Nothing changes until more answers arrive: remember what these nodes wait for.
            if np.array_equal(candidates, self._open_nodes()):
                self._pending_cache = (candidates, keys, lo, hi)
            return 0, candidates[:0]
        self._pending_cache = None
        self._query_cache = None
        n_left = _kernels.partition(
            self.members,
            self.items,
            self.nodes.start[candidates],
            self.nodes.end[candidates],
            self.nodes.pivot_left[candidates],
            self.nodes.pivot_right[candidates],
            complete,
            lower_closer,
        )[complete]
        nodes = candidates[complete]
        start, end = self.nodes.start[nodes], self.nodes.end[nodes]
        middle = start + n_left
        key = self.nodes.key[nodes]
        children = self.nodes.append(
            tree=np.concatenate([self.nodes.tree[nodes]] * 2),
            start=np.concatenate([start, middle]),
            end=np.concatenate([middle, end]),
            depth=np.concatenate([self.nodes.depth[nodes] + 1] * 2),
            key=np.concatenate([_mix(key ^ _LEFT_SALT), _mix(key ^ _RIGHT_SALT)]),
        )
        self.nodes.left[nodes] = children[: len(nodes)]
        self.nodes.right[nodes] = children[len(nodes) :]
        self.nodes.status[nodes] = SPLIT
        return len(nodes), children


_STATE_KINDS = {
    "meta": "u",
    "items": "iu",
    "y": "iuf",
    "members": "i",
    "roots": "i",
    "store_keys": "iu",
    "store_lo": "i",
    "store_hi": "i",
    **{f"node_{name}": np.dtype(dtype).kind for name, dtype in _Nodes.FIELDS.items()},
}


class _NotAState(ValueError):
    """What is wrong with a saved state, worded for the person who sent it."""


def _checked_state_arrays(data: bytes, max_bytes: int) -> dict[str, np.ndarray]:
    """The saved state's arrays, once they are known to be exactly the builder's:
    one-dimensional, of numeric types, each as long as its bytes (read from the headers
    before anything unpacks), with votes that fit the hash table they are loaded into."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            names = [info.filename.removesuffix(".npy") for info in infos]
            if sorted(names) != sorted(_STATE_KINDS):
                missing = sorted(set(_STATE_KINDS) - set(names))
                wrong = f"it lacks {missing[:5]}" if missing else "some are repeated or unknown"
                raise _NotAState(f"the state's arrays are not a build's: {wrong}")
            total = sum(info.file_size for info in infos)
            if total > max_bytes:
                raise _NotAState(
                    f"the state unpacks to {total:,} bytes, over the limit of {max_bytes:,}"
                )
            for name, info in zip(names, infos, strict=True):
                with archive.open(info) as entry:
                    version = np.lib.format.read_magic(entry)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read_header(entry)
                size = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                if dtype.hasobject or dtype.kind not in _STATE_KINDS[name] or len(shape) != 1:
                    raise _NotAState(f"the state's array '{name}' is of the wrong kind or shape")
                if size > info.file_size:
                    raise _NotAState(f"the state's array '{name}' is shorter than it says")
        with np.load(io.BytesIO(data), allow_pickle=False) as state:
            arrays = {name: state[name] for name in state.files}
    except _NotAState:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, TypeError) as error:
        raise ValueError(f"the state is not a saved build: {error}") from None
    keys = arrays["store_keys"].astype(np.int64, casting="unsafe")
    lo, hi = arrays["store_lo"], arrays["store_hi"]
    if not len(keys) == len(lo) == len(hi):
        raise ValueError("the state is inconsistent: its votes and their queries")
    if len(keys) and (
        keys.min() < 0 or min(lo.min(), hi.min()) < 0 or max(lo.max(), hi.max()) >= 2**31
    ):
        raise ValueError("the state is inconsistent: its votes")
    return arrays


def _check_state_consistent(builder: CompRFBuilder) -> None:
    """Every index of a loaded state points inside the array it indexes, every split
    node's children come after it and lie within it, and the tables agree in length."""

    def require(condition, what: str) -> None:
        if not condition:
            raise ValueError(f"the state is inconsistent: {what}")

    params = builder.params
    require(isinstance(params, dict) and sorted(params) == sorted(_PARAM_NAMES), "its parameters")
    _check_params(**params)
    require(isinstance(builder.seed, int) and 0 <= builder.seed < 2**63, "its seed")
    require(builder.random_state is None or isinstance(builder.random_state, int), "random_state")
    items, y, members, roots = builder.items, builder.y, builder.members, builder.roots
    n = len(items)
    require(2 <= n <= MAX_ITEMS and items.min() >= 0 and items.max() < MAX_ITEMS, "its item ids")
    require(len(np.unique(items)) == n, "an item id repeats")
    require(len(y) == n, "one label per item")
    if params["task"] == "classification":
        classes = builder.classes
        require(classes is not None and classes.ndim == 1 and len(classes) >= 1, "its classes")
        most = 0 if classes is None else len(classes)
        require(y.dtype.kind in "iu" and y.min() >= 0 and y.max() < most, "its labels")
    else:
        require(builder.classes is None and bool(np.all(np.isfinite(y))), "its targets")
    n_trees = params["n_trees"]
    size = n if params["subsample"] == 1 else max(2, int(round(params["subsample"] * n)))
    require(len(members) == n_trees * size, "members per tree")
    require(members.min() >= 0 and members.max() < n, "its members")
    nodes = builder.nodes
    count = nodes.count
    require(all(len(array) == count for array in nodes.arrays.values()), "node table lengths")
    require(len(roots) == n_trees and count >= n_trees, "one root per tree")
    trees = np.arange(n_trees)
    require(
        np.array_equal(roots, np.sort(roots)) and roots.min() >= 0 and roots.max() < count,
        "its roots",
    )
    start, end, status = nodes.start, nodes.end, nodes.status
    require(
        np.array_equal(nodes.tree[roots], trees)
        and np.array_equal(start[roots], trees * size)
        and np.array_equal(end[roots], (trees + 1) * size),
        "the roots' ranges",
    )
    require(
        bool(np.all((nodes.tree >= 0) & (nodes.tree < n_trees) & (nodes.depth >= 0))),
        "node trees and depths",
    )
    require(bool(np.all((0 <= start) & (start <= end) & (end <= len(members)))), "node ranges")
    require(bool(np.all(np.isin(status, (OPEN, SPLIT, LEAF)))), "node states")
    for pivot in (nodes.pivot_left, nodes.pivot_right):
        require(bool(np.all((pivot == -1) | np.isin(pivot, items))), "node pivots")
    asks = (status == OPEN) & (end - start > params["leaf_size"])
    require(
        bool(np.all((nodes.pivot_left[asks] >= 0) & (nodes.pivot_right[asks] >= 0))),
        "an open node without pivots",
    )
    split = np.flatnonzero(status == SPLIT)
    left, right = nodes.left[split], nodes.right[split]
    require(
        bool(np.all((left > split) & (right > split) & (left < count) & (right < count))),
        "a split node's children",
    )
    require(
        bool(
            np.all(
                (start[left] == start[split])
                & (end[left] == start[right])
                & (end[right] == end[split])
                & (nodes.tree[left] == nodes.tree[split])
                & (nodes.tree[right] == nodes.tree[split])
            )
        ),
        "a split node's children do not divide it",
    )
    unsplit = status != SPLIT
    require(
        bool(np.all((nodes.left[unsplit] == -1) & (nodes.right[unsplit] == -1))),
        "an unsplit node with children",
    )
    keys, lo, hi = builder.store.state().values()
    require(bool(np.all((lo >= 0) & (hi >= 0))), "its votes")
    parts = np.stack([keys >> (2 * ID_BITS), (keys >> ID_BITS) & ID_MASK, keys & ID_MASK])
    require(bool(np.all(np.isin(parts, items))), "its answers' items")


class CompRFRouter:
    """Routes items down every tree of a fitted forest, resumably, like the builder.

    At each internal node an item is asked ``(item, left pivot, right pivot)``; answers
    the forest already holds (from its build) are reused, never asked again. Each
    (item, tree) pair looks the forest's answers up once per node it reaches; while it
    waits, only this router's own (small) store of new answers is consulted.
    """

    _wait: tuple[np.ndarray, ...]  # (pairs, keys, forest's lo votes, hi votes) not yet met

    def __init__(self, forest: CompRF, items) -> None:
        check_is_fitted(forest, "nodes_")
        self.forest = forest
        self.items = _check_items(items)
        n_trees = len(forest.roots_)
        self.position = np.tile(forest.roots_, len(self.items))  # (item, tree) pairs, flat
        self.pair_item = np.repeat(self.items, n_trees)
        self.store = AnswerStore(forest.answers_per_query)
        empty = np.empty(0, np.int64)
        # The waiting pairs: which, their query keys and the forest's votes on them.
        self._wait = (empty, empty, empty, empty)
        self._advance(np.arange(len(self.position)))

    @property
    def is_complete(self) -> bool:
        return len(self._wait[0]) == 0

    @property
    def n_queries(self) -> int:
        return len(self.store)

    def pending_queries(self, return_needed: bool = False):
        pairs, keys, forest_lo, forest_hi = self._wait
        node = self.position[pairs]
        queries = np.stack(
            [
                self.pair_item[pairs],
                self.forest.nodes_["pivot_left"][node],
                self.forest.nodes_["pivot_right"][node],
            ],
            axis=1,
        )
        lo, hi = self.store.votes(keys)
        needed = needed_from_votes(lo + forest_lo, hi + forest_hi, self.forest.answers_per_query)
        return _distinct(queries, keys, needed, return_needed)

    def add_answers(self, triplets) -> None:
        self.store.add(check_triplets(triplets, MAX_ITEMS, name="answers"))
        pairs, keys, forest_lo, forest_hi = self._wait
        lo, hi = self.store.votes(keys)
        moving = self._move(pairs, keys, lo + forest_lo, hi + forest_hi)
        self._wait = tuple(array[~moving] for array in self._wait)
        self._advance(pairs[moving])

    def _move(self, pairs, keys, lo, hi) -> np.ndarray:
        """Move the pairs whose query is decided to the child it says; returns which moved."""
        decided, lower_closer = decided_from_votes(lo, hi, self.forest.answers_per_query)
        node = self.position[pairs[decided]]
        nodes = self.forest.nodes_
        go_left = lower_closer[decided] == (nodes["pivot_left"][node] < nodes["pivot_right"][node])
        self.position[pairs[decided]] = np.where(go_left, nodes["left"][node], nodes["right"][node])
        return decided

    def _advance(self, pairs: np.ndarray) -> None:
        """Move `pairs` down as far as held answers allow; the rest join the waiting list."""
        nodes = self.forest.nodes_
        while len(pairs):
            node = self.position[pairs]
            internal = nodes["left"][node] >= 0
            pairs, node = pairs[internal], node[internal]
            x = self.pair_item[pairs]
            left, right = nodes["pivot_left"][node], nodes["pivot_right"][node]
            # An item that is a pivot goes to its own side without a question.
            is_pivot = (x == left) | (x == right)
            self.position[pairs[is_pivot]] = np.where(
                x[is_pivot] == left[is_pivot],
                nodes["left"][node[is_pivot]],
                nodes["right"][node[is_pivot]],
            )
            asked = pairs[~is_pivot]
            keys = query_keys(x[~is_pivot], left[~is_pivot], right[~is_pivot])
            forest_lo, forest_hi = self.forest.store_.votes(keys)
            lo, hi = self.store.votes(keys)
            moved = self._move(asked, keys, lo + forest_lo, hi + forest_hi)
            waiting = ~moved
            self._wait = tuple(
                np.concatenate([old, new[waiting]])
                for old, new in zip(self._wait, (asked, keys, forest_lo, forest_hi), strict=True)
            )
            pairs = np.concatenate([pairs[is_pivot], asked[moved]])

    def leaves(self) -> np.ndarray:
        """The leaf reached in each tree: shape (n_items, n_trees)."""
        if not self.is_complete:
            raise ValueError("routing is not complete: answer its pending queries first")
        return self.position.reshape(len(self.items), -1)


class CompRF(BaseEstimator):
    """Comparison-based random forest (Haghiri, Garreau & von Luxburg, 2018).

    Parameters
    ----------
    n_trees : number of comparison trees.
    leaf_size : a node with at most this many items becomes a leaf (the paper's n0).
    subsample : share of the training items each tree is built on (1.0: all).
    supervised : choose pivots with different labels (classification); regression
        always chooses them without looking at the targets, as in the paper.
    task : "classification" (majority vote) or "regression" (mean).
    answers_per_query : answers gathered per query; the majority decides, ties ask again.
    random_state : seed; the same seed and the same answers give the same forest.

    Attributes
    ----------
    n_queries_ : distinct queries answered during the build.
    classes_ : class labels (classification).
    """

    classes_: np.ndarray

    _parameter_constraints: dict = {**_BUILD_CONSTRAINTS, "random_state": ["random_state"]}

    def __init__(
        self,
        n_trees: int = 100,
        leaf_size: int = 1,
        subsample: float = 1.0,
        supervised: bool = True,
        task: str = "classification",
        answers_per_query: int = 1,
        random_state=None,
    ) -> None:
        self.n_trees = n_trees
        self.leaf_size = leaf_size
        self.subsample = subsample
        self.supervised = supervised
        self.task = task
        self.answers_per_query = answers_per_query
        self.random_state = random_state

    def builder(self, items, y) -> CompRFBuilder:
        """A resumable build with this estimator's parameters."""
        self._validate_params()
        return CompRFBuilder(items, y, **self.get_params())

    def fit(self, items, y, oracle) -> CompRF:
        """Build the forest on labelled `items`, asking `oracle` every query it needs."""
        build = self.builder(items, y)
        tree_size = len(build.members) / self.n_trees
        depth = np.log2(max(tree_size / self.leaf_size, 2))
        build.store.reserve(int(1.1 * len(build.members) * depth))
        while not build.is_complete:
            queries, needed = build.pending_queries(return_needed=True)
            build.add_answers(oracle.answer(np.repeat(queries, needed, axis=0)))
        self._set_fitted(build)
        return self

    def _set_fitted(self, build: CompRFBuilder) -> None:
        count = build.nodes.count
        self.nodes_ = {name: array[:count].copy() for name, array in build.nodes.arrays.items()}
        self.roots_ = np.asarray(build.roots)
        self.members_ = build.members.copy()
        self.items_ = build.items
        self.store_ = build.store
        self.n_queries_ = build.n_queries
        if build.params["task"] == "classification" and build.classes is not None:
            self.classes_ = build.classes
            self.y_codes_ = build.y
        else:
            self.y_ = build.y

    def route(self, items) -> CompRFRouter:
        """A resumable routing of `items` (e.g. when people answer its queries)."""
        return CompRFRouter(self, items)

    def _leaves(self, items, oracle) -> np.ndarray:
        router = self.route(items)
        while not router.is_complete:
            queries, needed = router.pending_queries(return_needed=True)
            router.add_answers(oracle.answer(np.repeat(queries, needed, axis=0)))
        return router.leaves()

    def _pooled(self, leaves: np.ndarray):
        """Per item, the pooled members of its leaves: (item index of each, training index)."""
        flat = leaves.ravel()
        positions, owner, _, _ = _segments(self.nodes_["start"][flat], self.nodes_["end"][flat])
        return owner // leaves.shape[1], self.members_[positions]

    def proba_from_leaves(self, leaves: np.ndarray) -> np.ndarray:
        """Class shares of each item's pooled leaf members (rows of `leaves`)."""
        item, member = self._pooled(leaves)
        n_classes = len(self.classes_)
        counts = np.bincount(
            item * n_classes + self.y_codes_[member], minlength=len(leaves) * n_classes
        ).reshape(len(leaves), n_classes)
        return counts / counts.sum(axis=1, keepdims=True)

    def predict_from_leaves(self, leaves: np.ndarray) -> np.ndarray:
        if self.task == "classification":
            return self.classes_[np.argmax(self.proba_from_leaves(leaves), axis=1)]
        item, member = self._pooled(leaves)
        sums = np.bincount(item, weights=self.y_[member], minlength=len(leaves))
        return sums / np.bincount(item, minlength=len(leaves))

    def predict(self, items, oracle) -> np.ndarray:
        """Label (or value) of each item, routed down every tree by asking `oracle`."""
        check_is_fitted(self, "nodes_")
        return self.predict_from_leaves(self._leaves(items, oracle))

    def predict_proba(self, items, oracle) -> np.ndarray:
        check_is_fitted(self, "nodes_")
        if self.task != "classification":
            raise ValueError("predict_proba needs task='classification'")
        return self.proba_from_leaves(self._leaves(items, oracle))
