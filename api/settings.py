"""Service settings, read from the environment (prefix ``MESHPLAN_``) and validated at start-up.

Every value has a safe default, so ``meshplan serve`` runs with nothing set: an embedded SQLite file
``meshplan.db`` in the working directory, no auth, loopback only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from planner.specs import MAX_GPUS, MAX_LAYERS
from planner.specs.errors import MeshplanError

ENV_PREFIX = "MESHPLAN_"


class Settings(BaseSettings):
    """One field per environment variable ``MESHPLAN_<FIELD>`` (case-insensitive)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", validate_default=True)

    database_url: str = Field(
        default="sqlite:///meshplan.db",
        description="SQLAlchemy URL; the default is a SQLite file in the working directory "
        "(e.g. sqlite:////data/meshplan.db, postgresql+psycopg://user:pw@host/db).",
    )
    api_token: SecretStr | None = Field(
        default=None, description="When set, every /v1 call needs 'Authorization: Bearer <token>'."
    )
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, le=1024**3, description="Largest request body; larger → 413."
    )
    max_gpus: int = Field(
        default=65_536,
        ge=1,
        le=MAX_GPUS,
        description="Largest cluster (num_nodes × gpus_per_node) a request may describe.",
    )
    max_layers: int = Field(
        default=512, ge=1, le=MAX_LAYERS, description="Largest model (num_layers) a request may describe."
    )
    max_top_k: int = Field(default=10, ge=1, le=20, description="Largest top_k a plan request may ask for.")
    max_solver_time_s: float = Field(default=30.0, gt=0, le=600, description="Cap on options.time_limit_s.")
    max_solver_workers: int = Field(
        default=2, ge=1, le=64, description="Cap on options.num_workers (CP-SAT threads per solve)."
    )
    solver_concurrency: int = Field(default=2, ge=1, le=256, description="Solves running at once (thread pool size).")
    solver_queue: int = Field(
        default=64, ge=0, le=100_000, description="Solves allowed to wait for a slot; beyond that → 503."
    )
    solver_queue_timeout_s: float = Field(
        default=60.0, gt=0, le=3600, description="Longest wait for a solver slot before 503."
    )
    store_threads: int = Field(
        default=16,
        ge=1,
        le=256,
        description="Threads per worker running the store's work (and, on a server database, "
        "connections per worker for cache hits' reads).",
    )
    host: str = Field(default="127.0.0.1", min_length=1, description="Bind address of `meshplan serve`.")
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=256, description="uvicorn worker processes.")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value)
        except ArgumentError:
            raise ValueError(
                f"{value!r} is not a SQLAlchemy URL; use e.g. sqlite:///meshplan.db or postgresql+psycopg://user:pw@host/db"
            ) from None
        return value

    @field_validator("api_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None  # MESHPLAN_API_TOKEN="" means auth off, like unset
        if len(value.get_secret_value()) < 16:
            raise ValueError("the API token must have at least 16 characters; generate one with `openssl rand -hex 32`")
        return value

    @property
    def token(self) -> str | None:
        return self.api_token.get_secret_value() if self.api_token else None


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment (and ``overrides``); a bad value raises MeshplanError naming the
    environment variable and the fix."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = ENV_PREFIX + ".".join(str(p) for p in err["loc"]).upper()
        raise MeshplanError(name, err["msg"], f"set {name} to a valid value or unset it for the default") from None
