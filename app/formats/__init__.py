"""Judgement formats: each one module (app/formats/<name>.py) implementing the protocol
of app/formats/base.py, with its template (templates/formats/<name>.html), registered
once at import. The rest of the service asks the registry."""

# The settings offer the formats in the order they register: the default first.
from app.formats import triplet  # isort: skip
from app.formats import odd_one_out, rank, sort  # isort: skip
from app.formats.base import (
    MOST_REPEATED,
    REPEAT_RATERS,
    REPEAT_SHARE,
    Choice,
    JudgementFormat,
    PickedScreen,
    Screen,
    ScreenKey,
    ScreenShape,
    ThreeItems,
    repeat_source,
)
from app.formats.registry import (
    UnknownFormat,
    asked_by_studies,
    every,
    named,
    register,
    registered,
    study_format,
    template_source,
    uploaded,
)

# The built-in formats, in the order the settings offer them.
TRIPLET, ODD_ONE_OUT, RANK, SORT = triplet.TRIPLET, odd_one_out.ODD_ONE_OUT, rank.RANK, sort.SORT

__all__ = [
    "ODD_ONE_OUT",
    "RANK",
    "MOST_REPEATED",
    "REPEAT_RATERS",
    "REPEAT_SHARE",
    "SORT",
    "TRIPLET",
    "Choice",
    "JudgementFormat",
    "PickedScreen",
    "repeat_source",
    "Screen",
    "ScreenKey",
    "ScreenShape",
    "ThreeItems",
    "UnknownFormat",
    "asked_by_studies",
    "every",
    "named",
    "register",
    "registered",
    "study_format",
    "template_source",
    "uploaded",
]
