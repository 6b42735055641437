"""Settings from environment variables, each with a default that works out of the box."""

from __future__ import annotations

import os
import secrets
from enum import StrEnum
from functools import cached_property
from pathlib import Path

from limits import parse_many
from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class Mode(StrEnum):
    embedded = "embedded"
    production = "production"


class ConfigurationError(RuntimeError):
    """The settings cannot run a service; the message says which one to set."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLOSER_", extra="ignore")

    mode: Mode = Mode.embedded
    data_dir: Path = Path("data")
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "CLOSER_DATABASE_URL")
    )
    secret_key: str | None = None
    metrics_token: str | None = Field(
        default=None,
        description="The bearer token Prometheus sends to GET /metrics; unset: no metrics",
    )
    worker_metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="A `closer worker` serves its own counts at GET /metrics on this port "
        "(on CLOSER_HOST), with the metrics token, for Prometheus to scrape beside the web: "
        "for workers in containers or on machines of their own",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="Where people reach the service (https://closer.example.org): study links "
        "are built from it; required in production, where the request's Host header is not "
        "trusted",
    )
    smtp_host: str | None = Field(
        default=None,
        description="A mail server to send invitations through; unset: the workspace shows "
        "the link to send yourself",
    )
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_from: str = Field(
        default="closer@localhost", max_length=254, description="The invitations' sender"
    )
    smtp_starttls: bool = Field(
        default=True, description="Upgrade the mail connection with STARTTLS"
    )
    webhook_retry_seconds: str = Field(
        default="5,30,120,600,1800,3600,10800,21600",
        pattern=r"^\d+(\.\d+)?(,\d+(\.\d+)?)*$",
        description="The waits before each retry of a webhook delivery that failed, "
        "comma-separated seconds; after the last, it is given up",
    )
    webhook_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="How long a worker holds a webhook delivery it is sending: a worker "
        "that dies meanwhile leaves it to the next once this has passed",
    )
    webhook_private_addresses: bool | None = Field(
        default=None,
        description="Whether webhooks may post to addresses inside this network (loopback, "
        "private, link-local such as a cloud's metadata service); unset: yes in embedded "
        "mode, no in production",
    )
    rater_origins: str = Field(
        default="",
        description="Comma-separated origins (https://jatos.lab.example) whose pages may "
        "call the raters' API: a jsPsych timeline hosted elsewhere (clients/jspsych)",
    )
    api_docs: bool = Field(
        default=True, description="Serve the API documentation (/docs, /redoc, /openapi.json)"
    )
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "info"

    max_upload_bytes: int = 512 * MIB
    max_json_bytes: int = 16 * MIB
    max_public_body_bytes: int = 64 * 1024
    max_zip_uncompressed_bytes: int = 2048 * MIB
    max_zip_entries: int = 100_000
    max_zip_compression_ratio: int = 200
    max_image_pixels: int = 40_000_000
    max_image_bytes: int = 64 * MIB
    # Sounds and videos (app/items/media.py): each file, and all a project's files together.
    max_clip_bytes: int = 64 * MIB
    max_project_media_bytes: int = 4096 * MIB
    max_upload_errors: int = 50
    rate_limits: bool = Field(
        default=True, description="Limit joins and answers at public rating links"
    )
    rate_limit_joins_per_address: str = "60/minute"
    rate_limit_joins_per_study: str = "1200/minute"
    rate_limit_new_raters_per_study: str = Field(
        default="600/minute;6000/hour",
        description="New raters a study takes, whatever their addresses: a join flood from "
        "many addresses stops here (a study of 1,000 places fills in under 2 minutes)",
    )
    new_raters_reserved_for_platform_ids: float = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="The share of the new-rater budget only joins with a recruiting "
        "platform's participant id may take: an anonymous flood leaves it to them",
    )
    rate_limit_answers_per_session: str = "10/second;300/minute"
    rate_limit_sign_ins_per_address: str = "10/minute;100/hour"
    password_checks_at_once: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Passwords checked at once per web process (each Argon2 check takes "
        "64 MiB); sign-ins beyond wait their turn (account by account, known browsers "
        "first) up to 5 s, then get 503 with Retry-After",
    )
    worker_in_process: bool | None = Field(
        default=None,
        description="Run a worker thread inside `closer serve`; "
        "defaults to yes in embedded mode, no in production (run `closer worker`).",
    )
    worker_poll_seconds: float = 1.0
    # A running job whose worker sent no heartbeat for this long is taken over by another.
    worker_heartbeat_seconds: float = 5.0
    worker_stale_seconds: float = 60.0
    worker_compile_kernels: bool = Field(
        default=True,
        description="A worker (`closer worker`, or the one inside `closer serve` in the "
        "embedded default) compiles (or loads from numba's cache) the learners' kernels as "
        "it starts, beside its first jobs, so that no fit waits for them",
    )
    database_pool_size: int = Field(
        default=20, ge=1, description="PostgreSQL connections each web process keeps open"
    )
    database_max_overflow: int = Field(
        default=10, ge=0, description="Further connections a web process may open at peaks"
    )
    sqlite_busy_seconds: float = Field(
        default=10.0,
        gt=0,
        description="SQLite: how long a request waits for another's write before it is "
        "answered 503 with Retry-After (the rating page sends the answer again)",
    )
    answer_function: bool = Field(
        default=True,
        description="PostgreSQL: take the usual answer in one call of the closer_answer() "
        "function; off, every answer takes the Python scheduler (the differential test "
        "compares the two)",
    )
    scheduler_seed: int | None = Field(
        default=None,
        description="Seed the scheduler's random draws (attention checks, random triplets, "
        "sides) for a reproducible simulation or test; unset (as a real study must be, so "
        "that no rater can foresee a check), they come from the operating system",
    )
    answer_pool_size: int = Field(
        default=8,
        ge=1,
        description="PostgreSQL connections each web process keeps for raters' answers",
    )

    @field_validator(
        "rate_limit_joins_per_address",
        "rate_limit_joins_per_study",
        "rate_limit_new_raters_per_study",
        "rate_limit_answers_per_session",
        "rate_limit_sign_ins_per_address",
    )
    @classmethod
    def _rate_limit(cls, value: str) -> str:
        try:
            parse_many(value)
        except ValueError:
            raise ValueError(
                f"'{value}' is not a rate limit: write e.g. '60/minute' or '10/second;300/minute'"
            ) from None
        return value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'closer.db').as_posix()}"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def runs_worker_in_process(self) -> bool:
        if self.worker_in_process is not None:
            return self.worker_in_process
        return self.mode is Mode.embedded

    @property
    def webhooks_reach_private(self) -> bool:
        if self.webhook_private_addresses is not None:
            return self.webhook_private_addresses
        return self.mode is Mode.embedded

    @property
    def rater_origin_list(self) -> list[str]:
        return [
            origin.strip().rstrip("/") for origin in self.rater_origins.split(",") if origin.strip()
        ]

    @property
    def media_dir(self) -> Path:
        return self.data_dir / "media"

    @cached_property
    def effective_secret_key(self) -> str:
        """The explicit secret, or in embedded mode one created once and kept in data_dir."""
        if self.mode is Mode.production and len((self.secret_key or "").encode()) < 32:
            raise ConfigurationError(
                "CLOSER_SECRET_KEY must be set to at least 32 bytes in production mode "
                f"(CLOSER_MODE=production; it has {len((self.secret_key or '').encode())}); "
                "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'"
            )
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(48))
        return path.read_text().strip()

    def check_startable(self) -> None:
        """Fail before serving anything if the settings cannot run a service."""
        _ = self.effective_secret_key
        if self.mode is Mode.production and not self.public_url:
            raise ConfigurationError(
                "CLOSER_PUBLIC_URL must be set in production mode: the address people reach "
                "the service at (e.g. https://closer.example.org), which study links are built "
                "from"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.media_dir.mkdir(parents=True, exist_ok=True)


def get_settings() -> Settings:
    return Settings()
