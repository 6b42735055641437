"""Bounds on the numbers a client may send, so an id, offset or count the database cannot
hold is a 422 naming the field rather than a database error. PostgreSQL's `integer` ends
at 2^31 - 1 and `bigint` (SQLite's integer too) at 2^63 - 1."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from annotated_types import Ge, Le
from pydantic import BaseModel, ConfigDict, Strict

INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1

# A row of an `integer` key: projects, builds, models and their versions, raters, routings.
RowId = Annotated[int, Ge(1), Le(INT4_MAX)]
# A row of a `bigint` key: items, triplets, the queries shown to raters.
BigRowId = Annotated[int, Ge(1), Le(INT8_MAX)]


class RequestModel(BaseModel):
    """The base of every request body: read strictly, as its JSON schema says. A number
    is a number and a flag a flag: "5", true or "yes" where an integer belongs is a 422,
    not a 5, a 1 or a True. Enum fields take their values as text (`strict=False`), and
    tuples come as JSON lists (`JSONTuple`)."""

    model_config = ConfigDict(strict=True)


if TYPE_CHECKING:
    from builtins import tuple as JSONTuple  # what the checked value is
else:

    class JSONTuple:
        """`JSONTuple[str, str]`: a fixed-length tuple given as a JSON list, its entries still
        checked strictly (a strict tuple would want a Python tuple, which JSON has not)."""

        def __class_getitem__(cls, entries: tuple) -> object:
            return Annotated[tuple[entries], Strict(False)]
