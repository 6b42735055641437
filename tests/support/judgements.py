"""Judgements stored as an upload or the rating path will store them: one row per
screen, and the triplets it implies with its id."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.formats import named
from app.models import Judgement, Triplet, TripletSource


def store_judgements(session: Session, project_id: int, screens) -> list[int]:
    """`screens`: (format, context, shown, chosen) in item ids; returns their ids."""
    ids = []
    for fmt, context, shown, chosen in screens:
        judgement = Judgement(
            project_id=project_id, format=fmt, context=context, shown=shown, chosen=chosen
        )
        session.add(judgement)
        session.flush()
        reference = context[0] if context else None
        implied = named(fmt).implied_triplets(reference, shown, chosen)
        session.add_all(
            Triplet(
                project_id=project_id,
                anchor_id=anchor,
                closer_id=closer,
                farther_id=farther,
                source=TripletSource.upload,
                judgement_id=judgement.id,
            )
            for anchor, closer, farther in implied.tolist()
        )
        ids.append(judgement.id)
    session.flush()
    return ids
