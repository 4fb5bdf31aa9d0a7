"""``meshplan serve``: the service under uvicorn, with JSON-lines logs on stderr."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime

import typer

#: Attributes every LogRecord has; anything else on a record was passed as ``extra=`` and is logged.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, plus uvicorn's access fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, version, status = record.args
            entry.update(client=client, method=method, path=path, http_version=version, status=status)
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def log_config(level: str) -> dict:
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "api.serve_cli.JsonFormatter"}},
        "handlers": {"default": handler},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["default"], "level": level.upper(), "propagate": False},
            "meshplan": {"handlers": ["default"], "level": level.upper(), "propagate": False},
        },
    }


def serve(
    host: str | None = typer.Option(None, "--host", help="Bind address [env MESHPLAN_HOST, default 127.0.0.1]."),
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Port [env MESHPLAN_PORT, default 8000]."),
    workers: int | None = typer.Option(
        None, "--workers", min=1, max=256, help="Worker processes [env MESHPLAN_WORKERS, default 1]."
    ),
    log_level: str | None = typer.Option(
        None, "--log-level", help="critical|error|warning|info|debug [env MESHPLAN_LOG_LEVEL]."
    ),
) -> None:
    """Run the planner service: REST API under /v1, dashboard at /, SQLite unless MESHPLAN_DATABASE_URL."""
    # Imported here, not at the top: every other `meshplan` command starts without the database layer.
    import uvicorn

    from api.settings import load_settings
    from api.store import Store

    overrides = {
        k: v
        for k, v in {"host": host, "port": port, "workers": workers, "log_level": log_level}.items()
        if v is not None
    }
    settings = load_settings(**overrides)  # a bad value → MeshplanError naming the variable → exit 2
    Store(settings.database_url).close()  # the database opens (tables made) before we listen, or exit 2
    # Workers build the app from the environment: hand them the command-line values that way.
    for key, value in overrides.items():
        os.environ[f"MESHPLAN_{key.upper()}"] = str(value)
    shown = "localhost" if settings.host in {"0.0.0.0", "::"} else settings.host
    shown = f"[{shown}]" if ":" in shown else shown
    typer.echo(f"meshplan service: dashboard at http://{shown}:{settings.port}/ (API docs at /docs)")
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_config=log_config(settings.log_level),
        log_level=settings.log_level,
        proxy_headers=False,
        server_header=False,
    )


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
