"""The participant's path as the settings page's form sends it: the consent, the
questionnaire, the practice screens and the arms, each read into the API's shape with
what to show back and what is wrong, named so that a researcher can fix it."""

from __future__ import annotations

from pydantic import ValidationError

from app.projects.path_schemas import Arm, Consent, Practice, Questionnaire


def consent_from(form) -> tuple[Consent | None, dict, str | None]:
    """The consent the settings form gives (its text, and its statements one a line),
    what to show back, and what is wrong with it; both fields empty: no consent."""
    text = str(form.get("consent_text") or "").replace("\r\n", "\n").strip()
    lines = str(form.get("consent_statements") or "").splitlines()
    statements = [line.strip() for line in lines if line.strip()]
    shown = {"text": text, "statements": statements}
    if not text and not statements:
        return None, shown, None
    try:
        return Consent(text=text, statements=statements), shown, None
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        where = {"text": "the text", "statements": "the statements"}.get(
            str(problem["loc"][0]), "it"
        )
        return None, shown, f"Consent: {where}: {problem['msg']}"


MOST_QUESTION_ROWS = 40  # the form shows the questions and three empty rows


def questionnaire_from(form) -> tuple[Questionnaire | None, dict, str | None]:
    """The questionnaire the settings form gives (a row a question; empty rows left out),
    what to show back, and what is wrong with it; no question: no questionnaire."""
    questions = []
    for number in range(MOST_QUESTION_ROWS):
        prompt = str(form.get(f"q-{number}-prompt") or "").strip()
        name = str(form.get(f"q-{number}-name") or "").strip()
        if not prompt and not name:
            continue
        options = str(form.get(f"q-{number}-options") or "").splitlines()
        questions.append(
            {
                "name": name,
                "kind": str(form.get(f"q-{number}-kind") or "text"),
                "prompt": prompt,
                "options": [option.strip() for option in options if option.strip()],
                "required": f"q-{number}-required" in form,
            }
        )
    shown = {"when": str(form.get("questionnaire_when") or "after"), "questions": questions}
    if not questions:
        return None, shown, None
    try:
        return Questionnaire.model_validate(shown), shown, None
    except ValidationError as error:
        return None, shown, "Questionnaire: " + _problem(error, "questions", "question")


MOST_ARM_ROWS = 22  # the form shows the arms and two empty rows


# What an arm may set that the form's rows do not show: kept from the arm of that name.
KEPT_FROM_THE_API = ("shown", "picks", "practice")


def arms_from(
    form, stored: list[dict] | None = None
) -> tuple[list[dict] | None, list[dict], str | None]:
    """The arms the settings form gives (a row an arm; empty rows left out), what to show
    back, and what is wrong with them; no arm: none (the study is one arm). What an arm
    set through the API that the rows do not show stays as it was (`stored`)."""
    before = {arm["name"]: arm for arm in stored or []}
    arms = []
    for number in range(MOST_ARM_ROWS):
        field = f"arm-{number}-"
        name = str(form.get(field + "name") or "").strip()
        if not name:
            continue
        arm: dict = {"name": name, "open": field + "open" in form}
        target = str(form.get(field + "target") or "").strip()
        arm["target"] = int(target) if target.isascii() and target.isdigit() else (target or None)
        for setting in ("judgement", "question", "instructions"):
            text = str(form.get(field + setting) or "").replace("\r\n", "\n").strip()
            if text:
                arm[setting] = text
        share = str(form.get(field + "random_share") or "").strip()
        if share:
            arm["random_share"] = share  # the schema reads the number, or names the field
        keys = str(form.get(field + "items") or "").replace(",", "\n").splitlines()
        if any(key.strip() for key in keys):
            arm["items"] = [key.strip() for key in keys if key.strip()]
        for setting in KEPT_FROM_THE_API:
            if before.get(name, {}).get(setting) is not None:
                arm[setting] = before[name][setting]
        arms.append(arm)
    if not arms:
        return None, arms, None
    try:
        return [Arm.model_validate(arm).model_dump(exclude_none=True) for arm in arms], arms, None
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        at = ".".join(str(part) for part in problem["loc"]) or "it"
        return None, arms, f"Arms: {at}: {problem['msg'].removeprefix('Value error, ')}"


PRACTICE_ARROWS = ("->", "→", "=>")


def practice_lines(practice: dict | None) -> str:
    """The practice as the form shows it: a screen a line, its items, an arrow, the answer."""
    return "\n".join(
        f"{', '.join(trial['items'])} -> {', '.join(trial['answer'])}"
        for trial in (practice or {}).get("trials", [])
    )


def practice_from(form) -> tuple[dict | None, dict, str | None]:
    """The practice the settings form gives (a screen a line: the items' keys in screen
    order, then -> and the keys of the answer expected; and the pass mark), what to show
    back and what is wrong with it; no line: no practice."""
    text = str(form.get("practice_screens") or "").replace("\r\n", "\n")
    mark = str(form.get("practice_pass_at_least") or "").strip()
    shown = {"lines": text.strip(), "pass_at_least": mark}
    trials, line_numbers = [], []  # each screen's line in the form (blank lines skipped)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        arrow = next((arrow for arrow in PRACTICE_ARROWS if arrow in line), None)
        if arrow is None:
            return (
                None,
                shown,
                (
                    f"Practice: line {number}: write the screen's item keys, then -> and the "
                    "key(s) of the right answer, e.g. circle, oval, square -> oval"
                ),
            )
        items, answer = line.split(arrow, 1)
        trials.append({"items": _keys(items), "answer": _keys(answer)})
        line_numbers.append(number)
    if not trials:
        return None, shown, None
    if mark and not (mark.isascii() and mark.isdigit()):
        return None, shown, f"Practice: the pass mark must be a whole number; got {mark!r}"
    try:
        practice = Practice.model_validate(
            {"trials": trials, "pass_at_least": int(mark) if mark else None}
        )
    except ValidationError as error:
        return None, shown, "Practice: " + _problem(error, "trials", "line", line_numbers)
    return practice.model_dump(), shown, None


def _problem(error: ValidationError, rows: str, row: str, numbers: list[int] | None = None) -> str:
    """The first problem, placed by the form's row (`row` 3, from the list `rows`; its
    number in the form from `numbers` where rows were skipped) and its field."""
    problem = error.errors(include_url=False)[0]
    where = problem["loc"]
    if len(where) >= 2 and where[0] == rows and isinstance(where[1], int):
        number = numbers[where[1]] if numbers else where[1] + 1
        at = f"{row} {number}" + (f", {where[2]}" if len(where) > 2 else "")
    else:
        at = ".".join(str(part) for part in where) or "it"
    return f"{at}: {problem['msg'].removeprefix('Value error, ')}"


def _keys(text: str) -> list[str]:
    return [key.strip() for key in text.split(",") if key.strip()]
