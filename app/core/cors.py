"""The raters' API from a lab's own pages (a jsPsych timeline on JATOS, Pavlovia or the
lab's site): browsers let a page of another origin call it only where the answer says
so. Only the raters' routes say so, and only to the origins configured
(CLOSER_RATER_ORIGINS); the researchers' API and the pages never do."""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

RATER_API = "/api/v1/rate/"


class RaterOrigins:
    def __init__(self, app: ASGIApp, origins: list[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["content-type", "x-rater-token"],
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(RATER_API):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)
