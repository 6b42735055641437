"""What the service hands to browsers, signed with the secret key: rater session tokens,
and the workspace's session cookie, sign-in links and CSRF tokens. A forged, truncated
or mistyped one fails the signature and is refused without a database lookup, so a
stranger sending made-up tokens costs almost nothing."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from itsdangerous import BadSignature, SignatureExpired, Signer, TimestampSigner

# Longer than any token this service signs; a longer one is not looked at.
_MAX_PRESENTED = 200
# The rating page's cookie holding the rater's signed session token.
RATER_COOKIE = "closer_rater"


class RaterTokens:
    def __init__(self, secret_key: str) -> None:
        self._signer = Signer(secret_key, salt="closer.rater-session", sep=".")

    def issue(self, token: str) -> str:
        return self._signer.sign(token).decode()

    def verify(self, presented: str | None) -> str | None:
        """The token behind a presented one, or None if it was not signed here."""
        return _unsign(self._signer, presented)


class WorkspaceCookies:
    """The workspace's signed cookies and the CSRF tokens that go with them.

    The session cookie carries a random session key, signed: a forged cookie is refused
    without a lookup. A form's CSRF token is an HMAC of what the browser holds (its
    session key, or before sign-in a random nonce in a cookie of its own), so another
    site, which can make the browser send the cookie but cannot read it, cannot write
    the token."""

    def __init__(self, secret_key: str) -> None:
        self._session = Signer(secret_key, salt="closer.workspace-session", sep=".")
        self._nonce = Signer(secret_key, salt="closer.sign-in-nonce", sep=".")
        self._link = TimestampSigner(secret_key, salt="closer.sign-in-link", sep=".")
        self._device = TimestampSigner(secret_key, salt="closer.device", sep=".")
        self._csrf_key = hashlib.sha256(f"closer.csrf:{secret_key}".encode()).digest()

    def sign_session(self, key: str) -> str:
        return self._session.sign(key).decode()

    def session_key(self, presented: str | None) -> str | None:
        return _unsign(self._session, presented)

    def new_nonce(self) -> str:
        return self._nonce.sign(secrets.token_urlsafe(18)).decode()

    def nonce(self, presented: str | None) -> str | None:
        return _unsign(self._nonce, presented)

    def csrf_token(self, anchor: str) -> str:
        return hmac.new(self._csrf_key, anchor.encode(), hashlib.sha256).hexdigest()

    def csrf_holds(self, anchor: str | None, presented: str | None) -> bool:
        if not anchor or not presented:
            return False
        return hmac.compare_digest(self.csrf_token(anchor), presented)

    def sign_device(self, researcher_id: int) -> str:
        """A browser's mark that it signed in to this account with its password: its
        later password checks there go first under a flood (app/auth/password_checks)."""
        return self._device.sign(str(researcher_id)).decode()

    def device_researcher(self, presented: str | None, max_age_seconds: int) -> int | None:
        """The account a device cookie was given for, while it is younger than the age."""
        if presented is None or _signed_part(self._device, presented) is None:
            return None
        try:
            return int(self._device.unsign(presented, max_age=max_age_seconds).decode())
        except (BadSignature, ValueError):
            return None

    def sign_in_link_key(self, researcher_id: int) -> str:
        return self._link.sign(str(researcher_id)).decode()

    def sign_in_link_researcher(
        self, presented: str | None, max_age_seconds: int
    ) -> tuple[int | None, int, str]:
        """(the researcher's id, when the link was made in Unix seconds, "") for a good
        link, else (None, 0, why): "broken" for a link cut short, changed or forged,
        "expired" for one of this service past its age."""
        if presented is None or _signed_part(self._link, presented) is None:
            return None, 0, "broken"
        try:  # the signature holds: unsign reads and checks the link's age
            value, made = self._link.unsign(
                presented, max_age=max_age_seconds, return_timestamp=True
            )
            return int(value.decode()), int(made.timestamp()), ""
        except SignatureExpired:
            return None, 0, "expired"
        except (BadSignature, ValueError):
            return None, 0, "broken"


def _signed_part(signer: Signer, presented: str | None) -> bytes | None:
    """What `presented` signs, if it carries its signature exactly as this service writes
    it. `Signer.unsign`'s base64 decoder also takes padded (`…=`, `…==`) and other
    spellings of one signature, which would let one token pass under many names, each a
    key of its own to the rate limits."""
    if not presented or len(presented) > _MAX_PRESENTED:
        return None
    signed, sep, signature = presented.encode("utf-8", "replace").rpartition(signer.sep)
    if sep and hmac.compare_digest(signer.get_signature(signed), signature):
        return signed
    return None


def _unsign(signer: Signer, presented: str | None) -> str | None:
    signed = _signed_part(signer, presented)
    return None if signed is None else signed.decode()
