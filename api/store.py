"""Persistence of plans, profiles and run reports (SQLAlchemy 2).

Any SQLAlchemy URL works; the default is a SQLite file in WAL mode with ``synchronous=FULL``, so a
write that returned (the request was acknowledged after its commit) survives ``kill -9`` and power
loss. Records are stored as their validated JSON next to a few indexed columns for listing, and
are only ever read back as JSON through the pydantic schemas.

PostgreSQL (``postgresql+psycopg://user:pw@host/db``, extra ``meshplan[postgres]``) is tested the same
way: text that PostgreSQL cannot hold is kept out of the indexed columns (a NUL character becomes
U+FFFD there; the JSON keeps the exact value), free-form fields are unbounded ``Text`` columns, tables
are created under an advisory lock so several workers can start at once, and a connection attempt
gives up after ``connect_timeout`` seconds so ``/readyz`` answers promptly when the server is down.

Plans are keyed by the content hash of their canonical request (``request_key``): the same request
always maps to the same id. Profiles are content-addressed the same way; runs get random ids.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import Boolean, Float, Integer, String, Text, create_engine, event, func, select, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError, NoSuchModuleError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool

from api.schemas import Page, PlanSummary, ProfileSummary, RunSummary, StoredPlan, StoredProfile, StoredRun
from planner.errors import MeshplanError
from planner.specs import PlanRequest, PlanResponse, Profile, RunReport

ID_LENGTH = 32  # hex digits of SHA-256 kept as the id (128 bits)
PG_CONNECT_TIMEOUT_S = 10  # libpq connect_timeout unless the URL sets one
PG_SCHEMA_LOCK = 0x6D657368706C616E  # advisory lock key ("meshplan") held while creating tables


def canonical_json(data: object) -> str:
    """One text per value: sorted keys, no whitespace, UTF-8 kept."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_id(model_json: dict) -> str:
    return hashlib.sha256(canonical_json(model_json).encode()).hexdigest()[:ID_LENGTH]


def request_key(request: PlanRequest) -> str:
    """Content hash of a plan request with its defaults filled in: requests that differ only in
    spelling (key order, omitted defaults) share an id."""
    return content_id(request.model_dump(mode="json"))


def column_text(value: str) -> str:
    """``value`` as stored in an indexed column (and compared in filters): PostgreSQL text cannot
    hold NUL, so it becomes U+FFFD; the record's JSON keeps the exact value."""
    return value.replace("\x00", "\ufffd")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Base(DeclarativeBase):
    pass


class PlanRow(Base):
    __tablename__ = "plans"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[str] = mapped_column(String(32), index=True)
    model: Mapped[str] = mapped_column(String(128), index=True)
    gpu: Mapped[str] = mapped_column(String(64), index=True)
    num_gpus: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(32))
    step_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    mfu: Mapped[float | None] = mapped_column(Float, nullable=True)
    fits: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    request_json: Mapped[str] = mapped_column(Text)
    response_json: Mapped[str] = mapped_column(Text)


class ProfileRow(Base):
    __tablename__ = "profiles"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[str] = mapped_column(String(32), index=True)
    model: Mapped[str] = mapped_column(String(128), index=True)
    device: Mapped[str] = mapped_column(Text)  # unbounded in the schema
    source: Mapped[str] = mapped_column(String(32))
    profile_json: Mapped[str] = mapped_column(Text)


class RunRow(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[str] = mapped_column(String(32), index=True)
    model: Mapped[str] = mapped_column(Text)  # unbounded in the schema
    world_size: Mapped[int] = mapped_column(Integer)
    measured_step_time_s: Mapped[float] = mapped_column(Float)
    predicted_step_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    step_time_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    report_json: Mapped[str] = mapped_column(Text)


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, synchronous=FULL and a busy timeout (several uvicorn
    workers may share the file). Server databases get pre-pinged connections and enough of them for
    every thread of the request thread pool (anyio's 40), so a burst waits on the database, not on
    the pool; PostgreSQL also gets a connect timeout."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        connect_args = {}
        if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=40, connect_args=connect_args)
    database = parsed.database or ""
    memory = database in ("", ":memory:")
    if not memory:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        poolclass=StaticPool if memory else None,
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record):  # noqa: ANN001 - DBAPI types
        cur = dbapi_connection.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    return engine


def _summary_of(response: PlanResponse) -> dict:
    best = response.plans[0].estimate if response.plans else None
    gpu = response.cluster.gpu
    return {
        "model": column_text(response.model.name),
        "gpu": column_text(gpu if isinstance(gpu, str) else gpu.id),
        "num_gpus": response.cluster.num_gpus,
        "status": response.solver.status,
        "step_time_s": best.step_time_s if best else None,
        "tokens_per_s": best.tokens_per_s if best else None,
        "mfu": best.mfu if best else None,
        "fits": best.fits if best else None,
    }


class Store:
    """Plans, profiles and runs. Every write commits before it returns."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine = make_engine(url)
            self._create_tables()
        except (ModuleNotFoundError, NoSuchModuleError) as exc:
            raise MeshplanError(
                "MESHPLAN_DATABASE_URL", f"no database driver for {make_url(url).drivername!r} ({exc})",
                "install the driver the URL names (e.g. pip install 'psycopg[binary]' for postgresql+psycopg)",
            ) from None
        except (OperationalError, ProgrammingError, OSError) as exc:
            raise MeshplanError(
                "MESHPLAN_DATABASE_URL", f"cannot open the database {make_url(url).render_as_string(hide_password=True)} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
                "check the URL, that the server is up, and that the file's folder is writable",
            ) from None
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    def _create_tables(self) -> None:
        """Create missing tables; several workers may do this at once on an empty database. On
        PostgreSQL the loser of that race fails (duplicate pg_type row), so creation runs in one
        transaction holding an advisory lock: the second waits, then finds the tables. On SQLite the
        loser gets "table ... already exists" or, in WAL mode, an immediate "database is locked"
        (a read transaction cannot be upgraded to a write while another writes) and tries again."""
        for attempt in range(5):
            try:
                with self.engine.begin() as conn:
                    if conn.dialect.name == "postgresql":
                        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_SCHEMA_LOCK})
                    Base.metadata.create_all(conn)
                return
            except OperationalError as exc:
                if attempt == 4 or not any(m in str(exc) for m in ("already exists", "database is locked")):
                    raise
                time.sleep(0.05 * (attempt + 1))

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def _insert(self, row: Base) -> bool:
        """Insert ``row``; False when a row with its id exists (another writer won the race)."""
        try:
            with self._session.begin() as session:
                session.add(row)
            return True
        except IntegrityError:
            return False

    # ---- plans ---------------------------------------------------------------------------

    def get_plan(self, plan_id: str) -> StoredPlan | None:
        with self._session() as session:
            row = session.get(PlanRow, plan_id)
        if row is None:
            return None
        return StoredPlan(
            id=row.id,
            created_at=row.created_at,
            cached=True,
            request=PlanRequest.model_validate_json(row.request_json),
            response=PlanResponse.model_validate_json(row.response_json),
        )

    def put_plan(self, plan_id: str, request: PlanRequest, response: PlanResponse) -> tuple[StoredPlan, bool]:
        """Store a solved plan under ``plan_id``; returns (the stored plan, whether it is new)."""
        row = PlanRow(
            id=plan_id,
            created_at=utc_now(),
            request_json=canonical_json(request.model_dump(mode="json")),
            response_json=response.model_dump_json(),
            **_summary_of(response),
        )
        while not self._insert(row):
            existing = self.get_plan(plan_id)
            if existing is not None:  # another writer stored it first
                return existing, False
            # ... and it was deleted in between: insert again.
        return StoredPlan(id=plan_id, created_at=row.created_at, cached=False, request=request, response=response), True

    def list_plans(self, *, model: str | None, gpu: str | None, limit: int, offset: int) -> Page[PlanSummary]:
        query = select(PlanRow)
        if model:
            query = query.where(PlanRow.model == column_text(model))
        if gpu:
            query = query.where(PlanRow.gpu == column_text(gpu))
        with self._session() as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(query.order_by(PlanRow.created_at.desc(), PlanRow.id).limit(limit).offset(offset)).all()
        items = [
            PlanSummary(**{c: getattr(r, c) for c in PlanSummary.model_fields})
            for r in rows
        ]
        return Page[PlanSummary](items=items, total=total, limit=limit, offset=offset)

    def delete_plan(self, plan_id: str) -> bool:
        with self._session.begin() as session:
            row = session.get(PlanRow, plan_id)
            if row is None:
                return False
            session.delete(row)
        return True

    # ---- profiles ------------------------------------------------------------------------

    def put_profile(self, profile: Profile) -> tuple[StoredProfile, bool]:
        data = profile.model_dump(mode="json")
        profile_id = content_id(data)
        row = ProfileRow(
            id=profile_id,
            created_at=utc_now(),
            model=column_text(profile.model.name),
            device=column_text(profile.device),
            source=column_text(profile.source),
            profile_json=canonical_json(data),
        )
        if not self._insert(row):
            existing = self.get_profile(profile_id)
            if existing is not None:  # stored before (profiles are never deleted)
                return existing, False
        return StoredProfile(id=profile_id, created_at=row.created_at, profile=profile), True

    def get_profile(self, profile_id: str) -> StoredProfile | None:
        with self._session() as session:
            row = session.get(ProfileRow, profile_id)
        if row is None:
            return None
        return StoredProfile(id=row.id, created_at=row.created_at, profile=Profile.model_validate_json(row.profile_json))

    def list_profiles(self, *, model: str | None, limit: int, offset: int) -> Page[ProfileSummary]:
        query = select(ProfileRow)
        if model:
            query = query.where(ProfileRow.model == column_text(model))
        with self._session() as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(query.order_by(ProfileRow.created_at.desc(), ProfileRow.id).limit(limit).offset(offset)).all()
        items = [ProfileSummary(id=r.id, created_at=r.created_at, model=r.model, device=r.device, source=r.source) for r in rows]
        return Page[ProfileSummary](items=items, total=total, limit=limit, offset=offset)

    # ---- runs ----------------------------------------------------------------------------

    def put_run(self, report: RunReport) -> StoredRun:
        row = RunRow(
            id=uuid.uuid4().hex,
            created_at=utc_now(),
            model=column_text(report.model),
            world_size=report.world_size,
            measured_step_time_s=report.measured_step_time_s,
            predicted_step_time_s=report.predicted_step_time_s,
            step_time_ratio=report.step_time_ratio,
            report_json=report.model_dump_json(),
        )
        if not self._insert(row):
            raise RuntimeError(f"run id {row.id} collided")  # 128 random bits: does not happen
        return StoredRun(id=row.id, created_at=row.created_at, report=report)

    def get_run(self, run_id: str) -> StoredRun | None:
        with self._session() as session:
            row = session.get(RunRow, run_id)
        if row is None:
            return None
        return StoredRun(id=row.id, created_at=row.created_at, report=RunReport.model_validate_json(row.report_json))

    def list_runs(self, *, limit: int, offset: int) -> Page[RunSummary]:
        with self._session() as session:
            total = session.scalar(select(func.count()).select_from(RunRow)) or 0
            rows = session.scalars(select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id).limit(limit).offset(offset)).all()
        items = [RunSummary(**{c: getattr(r, c) for c in RunSummary.model_fields}) for r in rows]
        return Page[RunSummary](items=items, total=total, limit=limit, offset=offset)
