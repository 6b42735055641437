"""Every kind of job the workers run: importing this registers their handlers."""

from app.builds import jobs as build_jobs
from app.training import jobs as training_jobs

KINDS = (build_jobs.STEP, build_jobs.ROUTE, training_jobs.TRAIN)
