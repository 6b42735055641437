"""Proposals: the questions the samplers (app/learn/samplers.py) choose where the models
learn most, queued for raters as slots of purpose `proposal`.

The queue serves slots in priority order, so proposals come after what CompRF's builds
and routings wait for, and the project's `random_share` of uniformly random
questions (the unbiased answers held-out metrics need) is drawn before the queue is
looked at: the answer path is unchanged, one database call on PostgreSQL. The worker
refreshes a project's proposals from its newest fitted models (a TripletBoost model's
questions, comparison trees grown from the answers, need none fitted yet): when a refit
made them stale (they are replaced, leased ones aside) and when fewer than REFILL_BELOW
are left, also while a fit runs, for projects someone rated in the last RATED_WITHIN (a
refresh reads every answer: a project nobody rates costs the worker nothing, and its
first rater's join or answer starts it within a second). The purposes are interleaved
in the queue by the project's shares (`labelling_share`, `embedding_share`,
`placement_share`; all null: chosen from its models and items).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from app import learn
from app.core.db import rows_changed
from app.models import (
    Item,
    LearnedModel,
    ModelKind,
    ModelVersion,
    Project,
    Purpose,
    QuerySlot,
    Rater,
    SlotState,
    Split,
    VersionStatus,
)
from app.models._types import utcnow
from app.scheduling.statements import IS_OPEN, lease_free
from app.training import kinds
from app.training.fitted import Fitted, required_part
from app.training.service import load_fitted, newest_ready
from app.triplets.log import answer_columns, item_positions, newest_id

if TYPE_CHECKING:
    from app.learn import SamplerState

# Proposals queued at a time: enough to last through a refit (the worker refreshes them
# only between fits; a queue run dry serves random questions), few enough to be
# replaced cheaply (~0.1 s per 1,000) when the next fit makes them stale.
BATCH = 1000
REFILL_BELOW = 400
RATED_WITHIN = timedelta(minutes=10)
PURPOSES = ("labelling", "embedding", "placement")
# The proposal's purpose, kept in its slot's query key (the high bits).
PURPOSE_CODE = {name: code for code, name in enumerate(PURPOSES, start=1)}
KEY_BITS = 40


@dataclass(frozen=True)
class Refreshed:
    added: int
    withdrawn: int
    shares: dict[str, float]


def _is_proposal():
    return QuerySlot.priority == int(Purpose.proposal)


def newest_fitted(
    session: Session, project_id: int, of_kinds: list[ModelKind]
) -> tuple[ModelVersion, Fitted] | None:
    """The project's most recently fitted version of a model of these kinds, and its
    artifact."""
    newest, newest_at = None, None
    for model in session.scalars(
        select(LearnedModel).where(
            LearnedModel.project_id == project_id, LearnedModel.kind.in_(of_kinds)
        )
    ):
        version = newest_ready(session, model.id)
        if version is None or version.fitted_at is None:
            continue
        if newest_at is None or version.fitted_at > newest_at:
            newest, newest_at = version, version.fitted_at
    if newest is None:
        return None
    return newest, load_fitted(session, newest.id)


def _by_position(fitted: Fitted, item_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of the project's items is among the fitted ones, and whether it is."""
    positions, present = item_positions(fitted.item_ids, item_ids[:, None])
    return positions[:, 0], present


def sampler_state(session: Session, project: Project) -> tuple[SamplerState, np.ndarray]:
    """What the samplers see of a project now, and its item ids by position."""
    rows = session.execute(
        select(Item.id, Item.label, Item.split)
        .where(Item.project_id == project.id)
        .order_by(Item.id)
    ).all()
    item_ids = np.fromiter((row.id for row in rows), np.int64, len(rows))
    labels = np.array([row.label for row in rows], dtype=object)
    wanted = np.flatnonzero(
        np.array([row.label is None or row.split is Split.test for row in rows], dtype=bool)
    )
    columns = answer_columns(session, project.id, newest_id(session, project.id))
    block = np.stack([columns["anchor_id"], columns["closer_id"], columns["farther_id"]], axis=1)
    positions, known = item_positions(item_ids, block)
    state = {
        "n_items": len(item_ids),
        "answers": positions[known],
        "labels": labels,
        "wanted": wanted,
    }
    found = newest_fitted(session, project.id, kinds.informing("embedding"))
    if found is not None:
        _, fitted = found
        coordinates = required_part(fitted.coordinates)
        embedding = np.zeros((len(item_ids), coordinates.shape[1]))
        placed = np.zeros(len(item_ids), bool)
        where, present = _by_position(fitted, item_ids)
        answered = np.zeros(len(fitted.item_ids), bool)
        answered[fitted.candidates()] = True
        placed[present] = answered[where[present]]
        embedding[present] = coordinates[where[present]]
        state.update(embedding=embedding, placed=placed, new_items=np.flatnonzero(~placed))
    # What the boosted classifiers believe of each item: the labelling sampler asks where
    # they are torn between classes.
    found = newest_fitted(session, project.id, kinds.informing("class_shares"))
    predictions = None if found is None else found[1].predictions
    if found is not None and predictions is not None:
        _, fitted = found
        proba = np.full((len(item_ids), len(predictions.classes)), np.nan)
        where, present = _by_position(fitted, item_ids)
        proba[present] = predictions.proba[where[present]]
        state.update(classes=predictions.classes.astype(str), class_proba=proba)
    return learn.SamplerState(**state), item_ids


def _has_boosting(session: Session, project_id: int) -> bool:
    """Whether the project has a TripletBoost model, fitted or not."""
    return bool(
        session.scalar(
            select(
                select(LearnedModel.id)
                .where(
                    LearnedModel.project_id == project_id,
                    LearnedModel.kind.in_(kinds.informing("class_shares")),
                )
                .exists()
            )
        )
    )


def shares(project: Project, state: SamplerState, boosting: bool) -> dict[str, float]:
    """The purposes' shares of the proposals: the project's own where it set any (unset
    ones count as 0), else from what it has: labelling where labels are wanted and some
    are known (4 parts where the project has a TripletBoost model, 2 else), embedding
    quality wherever there is an embedding (1 part), placement where items have no place
    in it yet (1 part)."""
    explicit = {name: getattr(project, f"{name}_share") for name in PURPOSES}
    if any(value is not None for value in explicit.values()):
        weights = {name: value or 0.0 for name, value in explicit.items()}
    else:
        classes = set(state.item_labels()[state.labelled()])
        has_map = state.embedding is not None
        labels_wanted = state.wanted is not None and len(state.wanted) > 0 and len(classes) >= 2
        # Boosted classifiers need reference pairs asked of many items before they say
        # anything about a wanted item: most of the time goes there.
        weights = {
            "labelling": (4.0 if boosting else 2.0) if labels_wanted else 0.0,
            "embedding": 1.0 if has_map else 0.0,
            "placement": 1.0
            if has_map and state.new_items is not None and len(state.new_items)
            else 0.0,
        }
    total = sum(weights.values())
    return {name: (value / total if total else 0.0) for name, value in weights.items()}


def refresh(session: Session, project: Project, seed: int | None = None) -> Refreshed:
    """Replace the project's open proposals (those not leased) by fresh ones."""
    state, item_ids = sampler_state(session, project)
    boosting = _has_boosting(session, project.id)
    wanted_shares = shares(project, state, boosting)
    samplers = {
        # Boosted classifiers learn a reference pair only from the many labelled items
        # that answered it: they get comparison trees' pairs, asked of the labelled
        # members and of the wanted items riding down them; an embedding's kNN, pairs
        # near each item.
        "labelling": (
            learn.ForestLabellingSampler(random_state=seed)
            if boosting
            else learn.LabellingSampler(random_state=seed)
        ),
        "embedding": learn.EmbeddingSampler(random_state=seed),
        "placement": learn.PlacementSampler(random_state=seed),
    }
    wanted = {name: round(BATCH * share) for name, share in wanted_shares.items()}
    found = {
        name: samplers[name].propose(count, state).queries
        for name, count in wanted.items()
        if count
    }
    # A purpose with fewer good questions than its share (few wanted labels, say) leaves
    # the rest to those that filled theirs.
    short = BATCH - sum(len(queries) for queries in found.values())
    full = [name for name, queries in found.items() if len(queries) == wanted[name]]
    for name in full:
        if short <= 0:
            break
        more = samplers[name].propose(wanted[name] + short, state).queries
        short -= len(more) - len(found[name])
        found[name] = more
    ranked = []  # (place in the interleaved queue, purpose, query)
    for name, queries in found.items():
        for rank, query in enumerate(queries):
            # Spread each purpose evenly along the queue: the k-th of n at (k + ½)/n.
            ranked.append(((rank + 0.5) / len(queries), PURPOSE_CODE[name], query))
    ranked.sort(key=lambda entry: (entry[0], entry[1]))
    # The samplers ran before any slot was touched: the old proposals stay open to the
    # raters meanwhile, and the swap below holds their rows for a moment only.
    now = utcnow()
    rows = [
        {
            "project_id": project.id,
            "priority": int(Purpose.proposal),
            "query_key": (code << KEY_BITS) | number,
            "anchor_id": int(item_ids[query[0]]),
            "lo_id": int(item_ids[query[1]]),
            "hi_id": int(item_ids[query[2]]),
            "state": SlotState.open,
            "created_at": now,
        }
        for number, (_, code, query) in enumerate(ranked)
    ]
    session.flush()
    # The new rows go in before the old ones are withdrawn: the withdrawn rows stay
    # locked until the commit, and inserting a thousand rows after withdrawing held
    # the raters who asked for one of them for 300 ms. The project's row, which the
    # tally updates too, is touched last for the same reason.
    older = session.scalar(select(func.max(QuerySlot.id)).where(QuerySlot.project_id == project.id))
    if rows:
        session.execute(insert(QuerySlot), rows)
    withdrawn = 0
    if older is not None:
        withdrawn = rows_changed(
            session.execute(
                update(QuerySlot)
                .where(
                    QuerySlot.project_id == project.id,
                    QuerySlot.id <= older,
                    _is_proposal(),
                    IS_OPEN,
                    lease_free(now),
                )
                .values(state=SlotState.withdrawn)
                .execution_options(synchronize_session=False)
            )
        )
    if project.proposals_settings_version != project.settings_version:
        project.proposals_settings_version = project.settings_version
        session.flush()
    return Refreshed(len(rows), withdrawn, wanted_shares)


@dataclass(frozen=True)
class Standing:
    """Where a project's proposals stand: its newest fit, its settings' version, its
    newest proposal and how many are open and free to serve."""

    project_id: int
    fitted_at: datetime | None  # None: no model fitted yet
    settings_version: int
    proposed_at: datetime | None
    open_count: int
    proposed_under: int | None = None  # the settings' version of the last refresh

    @property
    def stale(self) -> bool:
        """Whether a fit or a change of the settings came after the last refresh."""
        return (
            self.proposed_at is None
            or (self.fitted_at is not None and self.proposed_at < self.fitted_at)
            or self.proposed_under != self.settings_version
        )


def standings(session: Session, only_project: int | None = None) -> list[Standing]:
    """Every project (or the one given) with a fitted t-ETE or TripletBoost model, or a
    TripletBoost model yet to fit (its questions grow trees from the answers alone: they
    need no fit, and a fast crowd gives thousands of answers before the first one ends);
    four grouped queries."""
    only = () if only_project is None else (LearnedModel.project_id == only_project,)
    fitted = dict(
        session.execute(
            select(LearnedModel.project_id, func.max(ModelVersion.fitted_at))
            .join(ModelVersion, ModelVersion.model_id == LearnedModel.id)
            .where(
                ModelVersion.status == VersionStatus.ready,
                LearnedModel.kind.in_(kinds.informing()),
                *only,
            )
            .group_by(LearnedModel.project_id)
        ).all()
    )
    for boosted in session.scalars(
        select(LearnedModel.project_id).where(
            LearnedModel.kind.in_(kinds.informing("class_shares")), *only
        )
    ):
        fitted.setdefault(boosted, None)
    if not fitted:
        return []
    made = dict(
        session.execute(
            select(QuerySlot.project_id, func.max(QuerySlot.created_at))
            .where(_is_proposal(), QuerySlot.project_id.in_(list(fitted)))
            .group_by(QuerySlot.project_id)
        ).all()
    )
    # Only slots a rater can still be served count as left: a lease held by someone who
    # walked away (a closed tab, a bot on the public link) keeps its slot until it expires.
    left = dict(
        session.execute(
            select(QuerySlot.project_id, func.count())
            .where(
                _is_proposal(),
                IS_OPEN,
                lease_free(utcnow()),
                QuerySlot.project_id.in_(list(fitted)),
            )
            .group_by(QuerySlot.project_id)
        ).all()
    )
    versions = {
        project_id: (version, proposed_under)
        for project_id, version, proposed_under in session.execute(
            select(Project.id, Project.settings_version, Project.proposals_settings_version).where(
                Project.id.in_(list(fitted))
            )
        )
    }
    return [
        Standing(
            project_id,
            _naive(fitted_at),
            versions[project_id][0],
            _naive(made.get(project_id)),
            left.get(project_id, 0),
            versions[project_id][1],
        )
        for project_id, fitted_at in sorted(fitted.items())
        if project_id in versions
    ]


class Refresher:
    """Decides which projects' proposals to refresh, remembering (in the worker) what it
    last did for each: after a fit or a change of the settings (the shares) unless
    another worker has refreshed them since, when they run low only where this worker's
    last refresh queued any (a project whose samplers have nothing to ask is not read
    again until something changes)."""

    def __init__(self) -> None:
        # project: (the fit and settings used, proposals queued)
        self.last: dict[int, tuple[tuple, int]] = {}

    def due(self, standing: Standing) -> bool:
        used, made = self.last.get(standing.project_id, (None, 0))
        if used != (standing.fitted_at, standing.settings_version):
            return standing.stale or standing.open_count < REFILL_BELOW
        return made > 0 and standing.open_count < REFILL_BELOW

    def run(self, session: Session, standing: Standing) -> Refreshed | None:
        """None where nobody rated the project lately: it stays due until someone does."""
        if not being_rated(session, standing.project_id):
            return None
        project = session.get_one(Project, standing.project_id)
        done = refresh(session, project)
        self.last[standing.project_id] = (
            (standing.fitted_at, standing.settings_version),
            done.added,
        )
        return done


def being_rated(session: Session, project_id: int) -> bool:
    """Whether a rater joined or answered in the last RATED_WITHIN."""
    return bool(
        session.scalar(
            select(
                select(Rater.id)
                .where(
                    Rater.project_id == project_id,
                    Rater.last_seen_at >= utcnow() - RATED_WITHIN,
                )
                .exists()
            )
        )
    )


def _naive(moment):
    return moment.replace(tzinfo=None) if moment is not None and moment.tzinfo else moment
