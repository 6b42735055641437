"""Rater session tokens as the service hands them out: the random token, signed with the
secret key. A forged, truncated or mistyped token fails the signature and is refused
without a database lookup, so a stranger sending made-up tokens costs almost nothing."""

from __future__ import annotations

from itsdangerous import BadSignature, Signer

# Longer than any token this service signs; a longer one is not looked at.
_MAX_PRESENTED = 200


class RaterTokens:
    def __init__(self, secret_key: str) -> None:
        self._signer = Signer(secret_key, salt="closer.rater-session", sep=".")

    def issue(self, token: str) -> str:
        return self._signer.sign(token).decode()

    def verify(self, presented: str | None) -> str | None:
        """The token behind a presented one, or None if it was not signed here."""
        if not presented or len(presented) > _MAX_PRESENTED:
            return None
        try:
            return self._signer.unsign(presented).decode()
        except BadSignature:
            return None
