"""Mail out, where a mail server is configured (CLOSER_SMTP_HOST): the invitations to
a project. Nothing waits long on it: a server that does not answer within MAIL_SECONDS
is reported, and the caller falls back on showing what it would have sent."""

from __future__ import annotations

import smtplib
from email.message import EmailMessage

from app.core.config import Settings

MAIL_SECONDS = 10.0


def can_mail(settings: Settings) -> bool:
    return bool(settings.smtp_host)


def send(settings: Settings, *, to: str, subject: str, body: str) -> str | None:
    """Mail `body` to `to`; None when the server took it, else why not (in words)."""
    if not settings.smtp_host:
        return "no mail server is configured (CLOSER_SMTP_HOST)"
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = settings.smtp_from, to, subject
    message.set_content(body)
    try:
        with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=MAIL_SECONDS) as smtp:
            if settings.smtp_starttls:
                smtp.starttls()
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password or "")
            smtp.send_message(message)
    except (OSError, smtplib.SMTPException) as failed:
        return f"the mail server {settings.smtp_host}:{settings.smtp_port} refused it ({failed})"
    return None
