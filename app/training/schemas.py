from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from app.core.errors import ServiceError
from app.core.fields import INT4_MAX, RequestModel, RowId
from app.models import ModelKind, VersionStatus

Seed = Field(default=0, ge=0, le=INT4_MAX, description="Seed: the same answers give the same fit")


# t-ETE's losses by name (app.learn.tete.NAMED_LOSSES; a test holds the two the same).
LossName = Literal["t-STE", "t-ETE", "STE", "SOE", "t-STE(d-1)"]
LOSS_NAMES: tuple[str, ...] = get_args(LossName)


class _Params(RequestModel):
    model_config = ConfigDict(extra="forbid")


MOST_BOOSTING_ROUNDS = 20_000_000


class TripletBoostParams(_Params):
    n_iter: int = Field(default=20_000, ge=1, le=2_000_000, description="Boosting rounds per run")
    n_runs: int = Field(
        default=20,
        ge=1,
        le=200,
        description="Boosted runs that vote together, each from uniform weights: steadier "
        "labels than one long run",
    )
    cv_folds: int = Field(
        default=3, ge=0, le=10, description="Folds of the cross-validated accuracy (0: none)"
    )
    warm_start: bool = Field(
        default=False,
        description="A refit boosts every run on from the last fit instead of anew: faster on "
        "millions of answers, but runs that go on through many refits lean on the noisiest "
        "answers and label worse",
    )
    random_state: int = Seed

    @model_validator(mode="after")
    def _rounds_in_all(self) -> TripletBoostParams:
        if self.n_iter * self.n_runs > MOST_BOOSTING_ROUNDS:
            raise ValueError(
                f"n_iter x n_runs must be at most {MOST_BOOSTING_ROUNDS:,} rounds in all; "
                f"got {self.n_iter:,} x {self.n_runs:,}"
            )
        return self


def _number_or_auto(
    low: float, high: float, integral: bool, nullable: bool = False, names: tuple[str, ...] = ()
):
    """A number in [low, high], one of `names` or the word 'auto', checked before the
    union is tried, so an error names the field itself (not one member of the union) and
    says every form."""
    kind = "an integer" if integral else "a number"
    named = "".join(f", '{name}'" for name in names)

    def check(value: Any) -> Any:
        if value == "auto" or (value is None and nullable) or value in names:
            return value
        wanted = int if integral else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted) or not low <= value <= high:
            raise ValueError(f"must be {kind} from {low:g} to {high:g}{named}, or 'auto'")
        return value

    return BeforeValidator(check)


class TETEParams(_Params):
    n_components: Annotated[int | Literal["auto"], _number_or_auto(1, 256, True)] = Field(
        default="auto",
        description="Embedding dimension, or 'auto': the smallest of 1, 2, 3, 5, 8, 12, 16, "
        "24, 32, 48, 64 (tried upwards while a dimension lowers the error) whose held-out "
        "triplet error is within one standard error (or 0.002) of the best: cross-validated "
        "below 100,000 answers, on one held-out share from there",
    )
    t: Annotated[
        float | LossName | Literal["auto"] | None,
        _number_or_auto(1, 3, False, nullable=True, names=LOSS_NAMES),
    ] = Field(
        default="auto",
        description="Loss temperature: 'auto' chooses the loss among t-STE (t = 1), t = 1.5, "
        "t-ETE (t = 2), STE (Gaussian kernel), SOE (a hinge on distances) and t-STE(d-1) "
        "(d - 1 degrees of freedom, as its authors and cblearn) by "
        "cross-validated held-out triplet error; a number or one of those names fixes it "
        "(what the gain's refits do with the loss a version chose); None is the authors' "
        "default for the dimension",
    )
    cv: int = Field(default=3, ge=2, le=10, description="Folds for the 'auto' choices")
    max_iter: int = Field(default=1000, ge=1, le=100_000)
    tol: float = Field(
        default=1e-5, ge=0, description="Stop once the loss improves less (relative) in 10 steps"
    )
    n_iter_no_change: int | None = Field(
        default=200,
        ge=10,
        le=100_000,
        description="Stop once the training triplet error has not fallen in this many steps "
        "(null: never)",
    )
    optimizer: Literal["gd", "lbfgs"] = "gd"
    heldout_share: float | None = Field(
        default=None,
        ge=0,
        le=0.5,
        description="Answers kept back from the fit to measure the triplet error; null: none "
        "where something is chosen by cross-validation (its held-out error is reported, and "
        "the fit uses every answer), else 0.1",
    )
    k_neighbors: int = Field(default=5, ge=1, le=100, description="Neighbours that vote a label")
    warm_start: bool = Field(default=True, description="A refit starts from the last embedding")
    random_state: int = Seed


class ChoiceParams(_Params):
    similarity: Literal["dot", "kernel"] = Field(
        default="dot",
        description="How the embedding measures likeness: 'dot', the dot product of a sparse "
        "non-negative embedding (SPoSE's form: each dimension a property items have or "
        "lack); 'kernel', a Student-t kernel of the distance (t-STE's form)",
    )
    n_components: int = Field(
        default=64,
        ge=1,
        le=512,
        description="The dimensions of the first fit: the 'dot' form keeps those the answers "
        "use (its sparsity, l1, decides how many), the 'kernel' form all of them",
    )
    max_components: int = Field(
        default=256,
        ge=1,
        le=512,
        description="With l1 'auto', where the chosen fit uses every dimension, the 'dot' form "
        "tries twice as many, up to this, and keeps them where held-out screens support it",
    )
    l1: Annotated[float | Literal["auto"], _number_or_auto(0, 10, False)] = Field(
        default="auto",
        description="The 'dot' form's sparsity; 'auto' chooses it (and so the dimension) on "
        "held-out screens: the sparsest whose held-out log loss, its probabilities "
        "calibrated, is within one standard error of the lowest",
    )
    passes: int = Field(
        default=8, ge=0, le=200, description="Stochastic passes over the choices before L-BFGS"
    )
    max_iter: int = Field(default=300, ge=1, le=10_000, description="The most L-BFGS iterations")
    heldout_share: float = Field(
        default=0.1,
        ge=0,
        le=0.5,
        description="Screens (whole) kept back from the fit to measure its held-out choice "
        "accuracy; only screens chosen at random, never adaptively",
    )
    k_neighbors: int = Field(default=5, ge=1, le=100, description="Neighbours that vote a label")
    random_state: int = Seed


class SMERFParams(_Params):
    n_estimators: int = Field(default=100, ge=1, le=2000)
    max_features: int | float | Literal["sqrt", "log2"] | None = "sqrt"
    min_samples_leaf: int = Field(default=1, ge=1, le=INT4_MAX)
    max_depth: int | None = Field(default=None, ge=1, le=INT4_MAX)
    dissimilarity: Literal["labels", "target", "embedding", "matrix"] = Field(
        default="labels",
        description="Where D comes from: the labels (classes), the target (numbers), a "
        "t-ETE model's current embedding (embedding_model_id), or an uploaded matrix",
    )
    embedding_model_id: RowId | None = None
    k_neighbors: int = Field(default=5, ge=1, le=100)
    random_state: int = Seed


class DisDFParams(_Params):
    n_estimators: int = Field(default=100, ge=1, le=2000)
    max_levels: int = Field(default=5, ge=1, le=20)
    n_folds: int = Field(default=3, ge=2, le=10)
    random_state: int = Seed


class CompRFParams(_Params):
    pass


class InvalidParams(ServiceError):
    status_code = 422


class DissimilarityMatrix(RequestModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[str] = Field(min_length=2, max_length=20_000, description="Items, in row order")
    values: list[list[float]] = Field(description="Symmetric, zero diagonal, one row per key")


class ModelCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    kind: ModelKind = Field(strict=False)
    params: dict[str, Any] = Field(
        default_factory=dict, description="The kind's parameters (see the *Params schemas)"
    )
    auto_refit: bool = Field(
        default=True, description="Passive learners: refit by themselves as answers grow"
    )
    refit_growth: float = Field(
        default=0.2, gt=0, le=100, description="Refit once answers grew by this share"
    )
    min_answers: int = Field(
        default=100, ge=1, le=INT4_MAX, description="Answers before the first auto fit"
    )
    build_id: RowId | None = Field(default=None, description="CompRF: the build it comes from")
    arm: str | None = Field(
        default=None,
        max_length=64,
        description="Fit on the answers of this arm of the study only (its name); null: "
        "every arm's. A CompRF model comes from its build, which asks every arm",
    )
    matrix: DissimilarityMatrix | None = Field(
        default=None, description="SMERF with dissimilarity 'matrix': D over item keys"
    )
    train: bool = Field(default=True, description="Queue the first fit at once")


class ModelUpdate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    auto_refit: bool | None = None
    refit_growth: float | None = Field(default=None, gt=0, le=100)
    min_answers: int | None = Field(default=None, ge=1, le=INT4_MAX)
    params: dict[str, Any] | None = Field(
        default=None, description="New parameters: the next version uses them"
    )

    @field_validator("auto_refit", "refit_growth", "min_answers", "params")
    @classmethod
    def _left_out_not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("leave the field out to keep its value; it cannot be null")
        return value


class VersionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    number: int
    status: VersionStatus
    trigger: str
    progress: float = Field(description="0..1; 1 once ready")
    message: str
    params: dict[str, Any]
    answers_count: int = Field(description="Answers fitted on (held-out ones not counted)")
    answers_cutoff: int = Field(description="Id of the last triplet the fit could read")
    heldout_count: int = Field(description="Answers kept back to measure the triplet error")
    n_items: int
    metrics: dict[str, Any]
    converged: bool | None = Field(
        default=None,
        description="Whether the fit's optimiser stopped because the loss settled (false: it "
        "ran out of steps, see message); null for learners without an iterative fit",
    )
    artifact_bytes: int
    warm_start_from: int | None
    job_id: int | None
    created_at: datetime
    fitted_at: datetime | None


class ModelOut(BaseModel):
    id: int
    project_id: int
    name: str
    kind: ModelKind
    params: dict[str, Any]
    auto_refit: bool
    refit_growth: float
    min_answers: int
    build_id: int | None
    arm: str | None = Field(default=None, description="Fitted on this arm's answers only")
    created_at: datetime
    serving: VersionOut | None = Field(description="The newest ready version: it serves")
    latest: VersionOut | None = Field(description="The newest version, in any state")


class LabelledShare(BaseModel):
    accuracy: float = Field(description="Among the items the model gave a label")
    coverage: float = Field(description="The share of the measured items given a label")
    right: float = Field(
        description="The share of all measured items labelled right (accuracy x coverage): "
        "an item left without a label counts as wrong"
    )


class LabellingStandingOut(BaseModel):
    model_id: int
    name: str
    kind: ModelKind
    answers: int = Field(description="The answers its newest fit (or build and routing) used")
    test: LabelledShare | None = Field(description="On the researcher's test split")
    cv: LabelledShare | None = Field(description="Cross-validated over the labelled items")


class LabellingOut(BaseModel):
    standings: list[LabellingStandingOut] = Field(
        description="Every model whose newest ready version labels items (a CompRF model "
        "once a routing of the test split is complete)"
    )
    best_model_id: int | None = Field(
        description="The model that labels the most items right now, on `measure`; null "
        "where fewer than two models are measured alike"
    )
    measure: Literal["test", "cv"] | None


class CeilingOut(BaseModel):
    """The study's noise ceiling: how often a rater's choice on a screen that others
    answered too is the others' majority choice (a tie a share), over every such answer."""

    accuracy: float | None = Field(
        description="The ceiling: how often the other raters' majority on a screen chose as "
        "a rater did (a floor of what knowing each screen's likeliest choice would score); "
        "null until a screen has answers of two raters"
    )
    majority_share: float | None = Field(
        description="The share of those answers that agree with their screen's majority, "
        "the rater included (SPoSE's noise ceiling): above what a model can expect; the "
        "likeliest choice's accuracy lies between `accuracy` and this"
    )
    low: float | None = Field(description="The bootstrap interval's lower end (over screens)")
    high: float | None = Field(description="Its upper end")
    level: float = Field(description="The interval's level")
    screens: int = Field(
        description="Screens (and triplet questions: an anchor and a pair) answered by two "
        "raters or more"
    )
    raters: int = Field(description="Raters who answered them (excluded raters left out)")
    answers: int = Field(description="Answers the ceiling is the mean of")
    within_rater: float | None = Field(
        description="Where a rater answered a screen twice: the share of second answers "
        "that agree with the first"
    )
    within_rater_pairs: int
    why: str | None = Field(description="Why there is no ceiling yet, where there is none")


class NeededOut(BaseModel):
    """Answers the random arm needs: a figure where its curve crossed the error; else a
    bound (`more_than`: beyond its last point; `at_most`: within its first)."""

    answers: float
    bound: Literal["exact", "more_than", "at_most"]


class CurvePointOut(BaseModel):
    answers: int = Field(description="The arm's first answers the fit learned from")
    error: float = Field(description="Its triplet error on the held-out answers")
    low: float = Field(description="The bootstrap interval's lower end (over held-out screens)")
    high: float


class GainFigureOut(BaseModel):
    against: str = Field(description="The arm asked at random it is compared with")
    answers: int = Field(description="The active arm's answers (outside the held-out ones)")
    error: float = Field(description="Its fit's held-out error on all of them")
    needed: NeededOut = Field(
        description="Answers the random arm needs to reach that error (interpolated on its "
        "curve in the logarithm of the answers)"
    )
    low: NeededOut = Field(description="The bootstrap interval's lower end")
    high: NeededOut = Field(description="Its upper end")
    ratio: float = Field(
        description="needed / answers: 2, asking actively did with half the answers; 1 or "
        "less, it saved nothing"
    )


class ArmGainOut(BaseModel):
    name: str
    asking: Literal["random", "active"]
    answers: int = Field(description="Its answers outside the held-out ones")
    curve: list[CurvePointOut] = Field(
        description="Held-out error of the model refitted on its first answers"
    )
    gain: GainFigureOut | None = Field(description="For an active arm: what asking saved")


class GainOut(BaseModel):
    """What asking actively saved, from the study's arms: one held-out curve per arm and
    each active arm's gain over the arm asked at random."""

    model_id: int
    version: int | None = Field(description="The ready version whose answers it read")
    status: Literal["ready", "queued", "computing", "failed", "unavailable"]
    current: bool | None = Field(
        default=None,
        description="Whether the gain shown is the newest ready version's (false: an "
        "older one's, while the newest is measured: `progress`)",
    )
    progress: float | None = None
    message: str | None = None
    why: str | None = Field(
        default=None, description="Why there is no gain (yet), where there is none"
    )
    measure: str | None = Field(default=None, description="The error on the curves")
    answers: int | None = None
    heldout: int | None = Field(default=None, description="Held-out answers (asked at random)")
    heldout_screens: int | None = None
    level: float | None = None
    fixed: dict[str, Any] = Field(
        default_factory=dict,
        description="What the version chose that every fit of the curves keeps (its "
        "dimension, loss or sparsity where its parameters said 'auto'): the curves compare "
        "the answers, not choices made again on fewer of them",
    )
    arms: list[ArmGainOut] = Field(default_factory=list)
    seconds: float | None = Field(default=None, description="The measure's own time")
