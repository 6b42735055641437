"""Adaptive questions: the samplers' proposals (labelling, embedding, placement), chosen
from the newest fitted models and stored as queue slots after the rest. Above training
(it reads fitted models) and scheduling (it fills the queue), below nothing but the
routes and the worker's job list."""
