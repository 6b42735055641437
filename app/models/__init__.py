"""All tables, imported here so Alembic and the services see one metadata."""

from app.core.db import Base
from app.models.build import Build, BuildStatus
from app.models.item import Item, Split
from app.models.job import Job, JobStatus
from app.models.learned import LearnedModel, ModelKind, ModelVersion, VersionStatus
from app.models.member import ProjectInvitation, ProjectMember, ProjectRole
from app.models.project import DesignVersion, LabelType, LinkState, Project
from app.models.queue import (
    ADAPTIVE_PURPOSES,
    FROM_QUEUE,
    Assignment,
    Choice,
    Purpose,
    QuerySlot,
    Routing,
    RoutingStatus,
    SlotState,
)
from app.models.rater import ParticipantErasure, PracticeAnswer, Rater, RaterSession
from app.models.researcher import (
    ApiToken,
    Researcher,
    TokenScope,
    WebSession,
    api_token_projects,
)
from app.models.tally import AnswerTally, AnswerTallyCursor
from app.models.triplet import (
    Judgement,
    Triplet,
    TripletSource,
    Upload,
    UploadKind,
)
from app.models.webhook import Webhook, WebhookDelivery

__all__ = [
    "ADAPTIVE_PURPOSES",
    "FROM_QUEUE",
    "AnswerTally",
    "AnswerTallyCursor",
    "ApiToken",
    "Assignment",
    "Base",
    "Build",
    "BuildStatus",
    "Choice",
    "DesignVersion",
    "Item",
    "Job",
    "JobStatus",
    "Judgement",
    "LabelType",
    "LinkState",
    "LearnedModel",
    "ModelKind",
    "ModelVersion",
    "Routing",
    "RoutingStatus",
    "Project",
    "ProjectInvitation",
    "ProjectMember",
    "ProjectRole",
    "Purpose",
    "QuerySlot",
    "ParticipantErasure",
    "PracticeAnswer",
    "Rater",
    "RaterSession",
    "Researcher",
    "SlotState",
    "Split",
    "TokenScope",
    "Triplet",
    "TripletSource",
    "Upload",
    "UploadKind",
    "VersionStatus",
    "WebSession",
    "Webhook",
    "WebhookDelivery",
    "api_token_projects",
]
