"""A ready project for newcomers: scikit-learn's handwritten digits as images, with labels
and pixel features, and a CompRF build started so there is something to rate at once."""

from __future__ import annotations

import csv
import io
import zipfile

import numpy as np
from PIL import Image, ImageFilter
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.service import ensure_researcher
from app.builds.jobs import request_step
from app.builds.service import BuildParams, start_build
from app.core.config import Settings
from app.items.images import ImageStore
from app.items.service import ingest_items
from app.models import Build, BuildStatus, LabelType, LinkState, ModelKind, Project, Researcher
from app.projects.service import create_project, set_link, update_rating
from app.training import service as training
from app.uploads.files import UploadedFile

DEMO_RESEARCHER = "demo"
DEMO_PROJECT = "Handwritten digits (demo)"
IMAGE_SIZE = 160
DEMO_INSTRUCTIONS = (
    "You will see a handwritten digit on top and two below it. Choose the one of the two "
    "that is drawn more like the one on top. Answer by what you see, the shape of the "
    "strokes, not by which number it is: a 1 can look more like a 7 than like another 1."
)


def digit_png(pixels: np.ndarray) -> bytes:
    """An 8x8 digit (0..16 ink) drawn as a pen stroke on white: the grid is smoothed
    and its ink sharpened again, so a rater sees a shape rather than a mosaic."""
    ink = np.pad(pixels.reshape(8, 8) / 16.0, 1)  # a margin, so border strokes fade out
    image = Image.fromarray((ink * 255).astype(np.uint8), mode="L")
    image = image.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC)
    image = image.filter(ImageFilter.GaussianBlur(IMAGE_SIZE / 48))
    smooth = np.asarray(image, dtype=np.float64) / 255
    stroke = 1 / (1 + np.exp(-(smooth - 0.5) * 14))
    buffer = io.BytesIO()
    Image.fromarray((255 - stroke * 230).astype(np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def digits_archive(n_items: int, n_test: int, random_state: int, n_unlabelled: int = 0) -> bytes:
    """A ZIP upload (manifest.csv + PNGs) of `n_items` digits: the last `n_unlabelled`
    without a label, the `n_test` before them in the test split."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    chosen = np.random.default_rng(random_state).permutation(len(X))[:n_items]
    manifest = io.StringIO()
    writer = csv.writer(manifest)
    writer.writerow(["key", "label", "split", "image", "features"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for position, index in enumerate(chosen):
            name = f"images/digit-{index:04d}.png"
            archive.writestr(name, digit_png(X[index]))
            label, split = str(y[index]), "train"
            if position >= n_items - n_unlabelled:
                label, split = "", "unlabelled"
            elif position >= n_items - n_unlabelled - n_test:
                split = "test"
            features = " ".join(f"{value:g}" for value in X[index])
            writer.writerow([f"digit-{index:04d}", label, split, name, features])
        archive.writestr("manifest.csv", manifest.getvalue())
    return buffer.getvalue()


def describe(build: Build) -> str:
    """What the demo's build waits for, in words: the builder's own estimate of the
    answers still needed, or that it is done."""
    if build.status is not BuildStatus.running:
        return f"build {build.id} is {build.status.value}"
    needed = int(build.progress.get("answers_needed_estimate", 0))
    return (
        f"build {build.id} of {build.params['n_trees']} trees needs about {needed:,} more "
        f"answers, {build.queries_pending:,} of them open now"
    )


def find_demo(session: Session) -> Project | None:
    """The demo project, if `closer demo` created it here."""
    return session.scalar(
        select(Project)
        .join(Researcher, Researcher.id == Project.owner_id)
        .where(Researcher.name == DEMO_RESEARCHER, Project.name == DEMO_PROJECT)
    )


def latest_build(session: Session, project: Project) -> Build | None:
    return session.scalar(
        select(Build).where(Build.project_id == project.id).order_by(Build.id.desc()).limit(1)
    )


def create_demo(
    *,
    session: Session,
    settings: Settings,
    store: ImageStore,
    n_items: int = 300,
    n_test: int = 50,
    params: BuildParams | None = None,
) -> tuple[Project, Build, bool]:
    """The demo project and its build; created once (returns created=False after)."""
    researcher = ensure_researcher(session=session, name=DEMO_RESEARCHER)
    project = find_demo(session)
    if project is not None:
        build = latest_build(session, project)
        if build is not None:
            return project, build, False
    else:
        project = create_project(
            session=session,
            owner=researcher,
            name=DEMO_PROJECT,
            description=(
                "Which digit is drawn more like the one on top? Answer by what you see: "
                "the shape, not the number."
            ),
            label_type=LabelType.classification,
        )
        update_rating(
            session=session,
            project=project,
            changes={
                "instructions": DEMO_INSTRUCTIONS,
                "question": "Which of the two is drawn more like the one on top?",
            },
        )
        archive = digits_archive(n_items, n_test, random_state=0)
        ingest_items(
            session=session,
            settings=settings,
            store=store,
            project=project,
            upload=UploadedFile("digits.zip", io.BytesIO(archive), "application/zip"),
            requested_format=None,
            idempotency_key=None,
        )
        set_link(session=session, project=project, state=LinkState.open)  # ready to rate
    build = start_build(
        session=session,
        project=project,
        params=params or BuildParams(n_trees=10, leaf_size=5, answers_per_query=1, random_state=0),
    )
    request_step(session=session, build=build)
    _add_demo_models(session, project)
    return project, build, True


def _add_demo_models(session: Session, project: Project) -> None:
    """Passive learners that refit by themselves as the demo's answers come in."""
    existing = {model.name for model in training.list_models(session=session, project=project)}
    for name, kind, params, min_answers in (
        ("digits map (t-ETE, 2-d)", ModelKind.tete, {"n_components": 2, "max_iter": 300}, 200),
        ("TripletBoost", ModelKind.tripletboost, {"cv_folds": 3}, 500),
    ):
        if name in existing:
            continue
        training.create_model(
            session=session,
            project=project,
            name=name,
            kind=kind,
            params=params,
            auto_refit=True,
            refit_growth=0.5,
            min_answers=min_answers,
            train_now=False,
        )
