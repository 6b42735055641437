"""Every kind of job the workers run: importing this registers their handlers."""

from app.adaptive import jobs as adaptive_jobs  # noqa: F401 (registers its upkeep)
from app.builds import jobs as build_jobs
from app.projects import jobs as project_jobs  # noqa: F401 (registers its upkeep)
from app.raters import jobs as rater_jobs  # noqa: F401 (registers its upkeep)
from app.training import jobs as training_jobs
from app.triplets import jobs as triplet_jobs  # noqa: F401 (registers its upkeep)
from app.webhooks import jobs as webhook_jobs  # noqa: F401 (registers its upkeep)

KINDS = (build_jobs.STEP, build_jobs.ROUTE, training_jobs.TRAIN, training_jobs.GAIN)
