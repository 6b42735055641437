"""Who may do what: the one place that says what each token scope and each role in a
project allows.

A route names the action it performs (app/auth/deps.py: `Viewing`, `Changing`, ...); a
caller is a researcher reached through a token, or a browser signed in with a password
(the whole account) or with a token (what the token may). In a project the researcher
may do what their role there allows (app/members: who holds which), and through a token
only what its scope allows too. Everything else asks here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.members.service import ROLE_SUMMARIES
from app.models import ApiToken, ProjectRole, Researcher, TokenScope


class Action(StrEnum):
    """What a route does, as the access rules see it."""

    serve = "serve"  # predictions, embeddings, distances, neighbours, models' status
    view = "view"  # a project's pages and reads: items, answers' counts, builds, raters
    export = "export"  # downloads of the answers, items, models and judgements
    identify = "identify"  # the participants' platform ids: their list, records, archives
    change = "change"  # uploads, builds, models, settings, exclusions; new projects
    redirect_raters = "redirect_raters"  # where raters are sent when their session ends
    delete_project = "delete_project"
    erase_participant = "erase_participant"  # a participant's data, at their request
    manage_members = "manage_members"  # who shares a project, in which role; its owner
    manage_account = "manage_account"  # tokens, and the browsers signed in


SCOPE_ACTIONS: dict[TokenScope, frozenset[Action]] = {
    TokenScope.predict: frozenset({Action.serve}),
    TokenScope.read: frozenset({Action.serve, Action.view, Action.export, Action.identify}),
    TokenScope.write: frozenset(
        {Action.serve, Action.view, Action.export, Action.identify, Action.change}
    ),
    TokenScope.admin: frozenset(Action),
}

# What each role may do in its project (a token of the member's does what both allow).
_VIEWER = frozenset({Action.serve, Action.view, Action.export})
ROLE_ACTIONS: dict[ProjectRole, frozenset[Action]] = {
    ProjectRole.owner: frozenset(Action) - {Action.manage_account},
    ProjectRole.editor: frozenset(Action)
    - {Action.manage_account, Action.delete_project, Action.manage_members},
    ProjectRole.viewer: _VIEWER,
}


# What each scope is for, in the words the workspace and the errors use.
SCOPE_SUMMARIES: dict[TokenScope, str] = {
    TokenScope.predict: "predictions, embeddings, distances, neighbours and models' status",
    TokenScope.read: "predict, plus reading the projects and downloading their data",
    TokenScope.write: "read, plus uploads, builds, models and settings",
    TokenScope.admin: "everything you can do, including tokens, deleting projects, erasing "
    "participants and where raters are sent",
}

ACTION_WORDS: dict[Action, str] = {
    Action.serve: "serving predictions",
    Action.view: "reading a project",
    Action.export: "downloading a project's data",
    Action.identify: "seeing the participants' platform ids",
    Action.change: "changing a project",
    Action.redirect_raters: "changing where raters are sent",
    Action.delete_project: "deleting a project",
    Action.erase_participant: "erasing a participant's data",
    Action.manage_members: "managing the project's members",
    Action.manage_account: "managing tokens and signed-in browsers",
}


def least_scope_for(action: Action) -> TokenScope:
    return next(scope for scope in TokenScope if action in SCOPE_ACTIONS[scope])


def role_allows(role: ProjectRole, sees_participants: bool, action: Action) -> bool:
    """Whether this role may perform `action` (a viewer sees the participants' ids only
    where the owner allowed it: `sees_participants`)."""
    if action == Action.identify and role == ProjectRole.viewer:
        return sees_participants
    return action in ROLE_ACTIONS[role]


def _least_role_for(action: Action) -> ProjectRole:
    return next(role for role in reversed(ProjectRole) if action in ROLE_ACTIONS[role])


@dataclass(frozen=True)
class Caller:
    """A researcher as this request reaches them: through a token (its scope, projects
    and expiry), or signed in with a password (everything they can)."""

    researcher: Researcher
    token: ApiToken | None = None
    # The projects a limited token reaches; None: every project of the researcher's.
    project_ids: frozenset[int] | None = None
    web_session_id: int | None = None
    # Their role in the project the request is about, where it is about one.
    project_role: ProjectRole | None = None
    sees_participants: bool = True

    @property
    def scope(self) -> TokenScope:
        return self.token.scope if self.token is not None else TokenScope.admin

    @property
    def expires_at(self) -> datetime | None:
        return self.token.expires_at if self.token is not None else None

    def may(self, action: Action | str) -> bool:
        action = Action(action)
        if action not in SCOPE_ACTIONS[self.scope]:
            return False
        role = self.project_role
        return role is None or role_allows(role, self.sees_participants, action)

    def reaches(self, project_id: int) -> bool:
        return self.project_ids is None or project_id in self.project_ids

    @property
    def all_projects(self) -> bool:
        return self.project_ids is None

    def refusal(self, action: Action) -> str:
        """Why this caller may not perform `action`, in a sentence."""
        role = self.project_role
        if action in SCOPE_ACTIONS[self.scope] and role is not None:
            if action == Action.identify and role == ProjectRole.viewer:
                return (
                    "your role in this project is 'viewer', without the participants' ids: "
                    "the owner can allow you to see them"
                )
            return (
                f"your role in this project is '{role.value}' ({ROLE_SUMMARIES[role]}); "
                f"{ACTION_WORDS[action]} needs the role '{_least_role_for(action).value}'"
            )
        needed = least_scope_for(action)
        return (
            f"this token's scope is '{self.scope.value}' ({SCOPE_SUMMARIES[self.scope]}); "
            f"{ACTION_WORDS[action]} needs a '{needed.value}' token"
        )

    def reaches_every(self, project_ids: frozenset[int] | None) -> bool:
        """Whether this caller reaches all of these projects (None: every project)."""
        if self.project_ids is None:
            return True
        return project_ids is not None and project_ids <= self.project_ids

    def covers(self, scope: TokenScope, project_ids: frozenset[int] | None) -> bool:
        """Whether a token of this scope over these projects asks for no more than this
        caller has: a token never makes one more powerful than itself."""
        return not SCOPE_ACTIONS[scope] - SCOPE_ACTIONS[self.scope] and self.reaches_every(
            project_ids
        )
