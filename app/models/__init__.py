"""All tables, imported here so Alembic and the services see one metadata."""

from app.core.db import Base
from app.models.build import Build, BuildStatus
from app.models.item import Item, Split
from app.models.job import Job, JobStatus
from app.models.project import LabelType, Project
from app.models.rater import Rater
from app.models.researcher import ApiToken, Researcher
from app.models.triplet import Triplet, TripletSource, Upload, UploadKind

__all__ = [
    "ApiToken",
    "Base",
    "Build",
    "BuildStatus",
    "Item",
    "Job",
    "JobStatus",
    "LabelType",
    "Project",
    "Rater",
    "Researcher",
    "Split",
    "Triplet",
    "TripletSource",
    "Upload",
    "UploadKind",
]
