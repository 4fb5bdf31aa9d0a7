"""Persistence of plans, profiles, run reports and calibrations (SQLAlchemy 2).

Any SQLAlchemy URL works; the default is a SQLite file in WAL mode with ``synchronous=FULL``, so a
write that returned (the request was acknowledged after its commit) survives ``kill -9`` and power
loss. Records are stored as their validated JSON next to a few indexed columns for listing, and
are only ever read back as JSON through the pydantic schemas.

PostgreSQL (``postgresql+psycopg://user:pw@host/db``, extra ``meshplan[postgres]``) is tested the same
way: text that PostgreSQL cannot hold is kept out of the indexed columns (a NUL character becomes
U+FFFD there; the JSON keeps the exact value), free-form fields are unbounded ``Text`` columns, and a
connection attempt gives up after ``connect_timeout`` seconds so ``/readyz`` answers promptly when the
server is down.

The schema is managed by the Alembic migrations in ``api/migrations`` (shipped inside the package),
applied when a ``Store`` opens (``migrate``). Several workers may start at once: on PostgreSQL the
upgrade runs in one transaction under an advisory lock, on SQLite in one ``BEGIN IMMEDIATE``
transaction (SQLite's own write lock, waited for up to the busy timeout); the second worker then finds
the schema current. A database made before Alembic (tables, no ``alembic_version``) is stamped at the
first revision, which is exactly that schema, and upgraded.

Plans are keyed by the content hash of their canonical request and the planner's cost-model version
(``request_key``): the same request maps to the same id until the cost model changes, and an answer of
an older cost model is never served as current (it stays readable under its id, marked ``stale``).
Profiles and calibrations are content-addressed the same way (a calibration's own ``id`` and
``created_at`` are left out of its hash) and never change once stored, so a plan keyed by a
``profile_id``/``calibration_id`` stays the answer to that request; runs get random ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from queue import SimpleQueue
from threading import Thread
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import (
    Boolean,
    Float,
    Integer,
    String,
    Text,
    bindparam,
    create_engine,
    event,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import IntegrityError, NoSuchModuleError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker
from sqlalchemy.pool import NullPool, QueuePool, StaticPool

if TYPE_CHECKING:
    from alembic.config import Config

from api.schemas import (
    CalibrationSummary,
    Page,
    PlanSummary,
    ProfileSummary,
    RunSummary,
    StoredPlan,
    StoredProfile,
    StoredRun,
)
from planner.specs import Calibration, PlanRequest, PlanResponse, Profile, RunReport, version
from planner.specs.errors import MeshplanError

ID_LENGTH = 32  # hex digits of SHA-256 kept as the id (128 bits)
PG_CONNECT_TIMEOUT_S = 10  # libpq connect_timeout unless the URL sets one
PG_SCHEMA_LOCK = 0x6D657368706C616E  # advisory lock key ("meshplan") held while migrating
MIGRATIONS = Path(__file__).with_name("migrations")
FIRST_REVISION = "0001"  # the schema create_all made before Alembic
STORE_THREADS = 16  # default size of the store's own thread pool (MESHPLAN_STORE_THREADS)
R = TypeVar("R")


def canonical_json(data: object) -> str:
    """One text per value: sorted keys, no whitespace, UTF-8 kept. A number JSON cannot hold (inf,
    NaN: e.g. a body's ``1e999``) is a ``MeshplanError`` naming its path in ``data`` (HTTP 422)."""
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        path = non_finite_path(data)
        if path is None:
            raise
        raise MeshplanError(
            path or "body",
            "not a finite number (JSON has no Infinity or NaN; 1e999 overflows to Infinity)",
            "give a finite number",
        ) from None


def non_finite_path(value: object, path: str = "") -> str | None:
    """The dotted path of the first number in ``value`` (dicts and lists) that is not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite_path(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def content_id(model_json: dict) -> str:
    return hashlib.sha256(canonical_json(model_json).encode()).hexdigest()[:ID_LENGTH]


def request_key(request: PlanRequest, cost_model_version: int | None = None) -> str:
    """Content hash of a plan request with its defaults filled in, and of the cost model that answers
    it (default: the planner's current ``COST_MODEL_VERSION``): requests that differ only in spelling
    (key order, omitted defaults) share an id; after the cost model changes the same request gets a
    new id, so the old answer is not served as current."""
    v = version.COST_MODEL_VERSION if cost_model_version is None else cost_model_version
    try:
        return content_id({"request": request.model_dump(mode="json"), "cost_model_version": v})
    except MeshplanError as exc:  # a number JSON cannot hold: name the request's own field
        raise MeshplanError(exc.field.removeprefix("request."), exc.message, exc.fix) from None


def column_text(value: str) -> str:
    """``value`` as stored in an indexed column (and compared in filters): PostgreSQL text cannot
    hold NUL, so it becomes U+FFFD; the record's JSON keeps the exact value."""
    return value.replace("\x00", "\ufffd")


def _head(plan_id: str, created_at: str, cached: bool, v: int, stale: bool) -> str:
    """The start of a ``StoredPlan`` body, up to ``"request":`` exclusive: the fields that depend on
    who asks (``cached``) and when (``stale``: the server's cost model)."""
    return (
        f'{{"id":{json.dumps(plan_id)},"created_at":{json.dumps(created_at)},"cached":{json.dumps(cached)},'
        f'"cost_model_version":{v},"stale":{json.dumps(stale)},'
    )


def plan_document(stored: StoredPlan) -> str:
    """The rest of the ``StoredPlan`` body, ``"request":…,"response":…}``, byte for byte as FastAPI
    serialises the model (``response_model``: pydantic's JSON, by alias): stored once with the plan,
    so that a read only puts the head in front (``plan_body``)."""
    full = stored.model_dump_json(by_alias=True)
    head = _head(stored.id, stored.created_at, stored.cached, stored.cost_model_version, stored.stale)
    if not full.startswith(head):  # the model's fields changed: _head must follow
        raise RuntimeError(f"StoredPlan JSON does not start with {head!r}: {full[:200]!r}")
    return full[len(head) :]


def plan_body(plan_id: str, created_at: str, cached: bool, row_version: int | None, document: str) -> bytes:
    """The ``StoredPlan`` JSON body: the head spliced in front of the stored ``document``; the same
    bytes as serialising the model, without parsing or validating anything."""
    return (_head(plan_id, created_at, cached, *_stale(row_version)) + document).encode()


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
    cost_model_version: Mapped[int | None] = mapped_column(Integer, nullable=True)  # NULL: before versioning
    document: Mapped[str | None] = mapped_column(Text, nullable=True)  # plan_document; NULL: before 0003


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


class CalibrationRow(Base):
    __tablename__ = "calibrations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[str] = mapped_column(String(32), index=True)
    gpu: Mapped[str] = mapped_column(String(64), index=True)
    stack: Mapped[str] = mapped_column(Text)  # up to 200 characters in the schema
    runs: Mapped[int] = mapped_column(Integer)
    in_sample_mape: Mapped[float | None] = mapped_column(Float, nullable=True)
    cross_validated_mape: Mapped[float | None] = mapped_column(Float, nullable=True)
    calibration_json: Mapped[str] = mapped_column(Text)


def calibration_id(calibration: Calibration) -> str:
    """The content hash of a calibration, without its ``id`` and ``created_at`` (set when stored):
    the same fit uploaded twice, or uploaded again as fetched, has one id."""
    return content_id(calibration.model_dump(mode="json", exclude={"id", "created_at"}))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, synchronous=FULL and a busy timeout (several uvicorn
    workers may share the file). Server databases get pre-pinged connections and enough of them for
    every thread of the request thread pool (anyio's 40), so a burst waits on the database, not on
    the pool; PostgreSQL also gets a connect timeout."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(
            url, pool_pre_ping=True, pool_size=5, max_overflow=40, connect_args=_server_connect_args(url)
        )
    database = parsed.database or ""
    memory = database in ("", ":memory:")
    if not memory:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        poolclass=StaticPool if memory else None,
    )
    _sqlite_pragmas(engine, memory)
    return engine


def _server_connect_args(url: str) -> dict:
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        return {"connect_timeout": PG_CONNECT_TIMEOUT_S}
    return {}


def _sqlite_pragmas(engine: Engine, memory: bool) -> None:
    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record):  # noqa: ANN001 - DBAPI types
        cur = dbapi_connection.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()


def alembic_config(connection: Connection | None) -> Config:
    """The Alembic configuration of the store (no alembic.ini): the packaged migrations, run on
    ``connection`` (see ``api/migrations/env.py``)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade_schema(connection: Connection, revision: str = "head") -> None:
    """Upgrade the schema on ``connection`` (inside its transaction) to ``revision``; a database
    made before Alembic is first stamped at the revision that matches it."""
    from alembic import command
    from alembic.util.exc import CommandError

    cfg = alembic_config(connection)
    tables = set(inspect(connection).get_table_names())
    try:
        if "plans" in tables and "alembic_version" not in tables:
            command.stamp(cfg, FIRST_REVISION)
        command.upgrade(cfg, revision)
    except CommandError as exc:  # e.g. a revision from a newer meshplan
        raise MeshplanError(
            "MESHPLAN_DATABASE_URL",
            f"the database's schema is not one this meshplan knows ({exc})",
            "use a database made by this meshplan version or an older one, or upgrade meshplan",
        ) from None


def migrate(engine: Engine, revision: str = "head") -> None:
    """Apply the migrations up to ``revision`` so that several processes may do it at once: one
    transaction that holds PostgreSQL's advisory lock; on a SQLite file, one ``BEGIN IMMEDIATE``
    transaction (the whole upgrade or nothing) taken while holding an exclusive ``flock`` on
    ``<database>.lock`` (SQLite refuses the switch to WAL, without waiting, while another connection
    writes, so the first connection of every starting process is serialized). Whoever comes second
    finds the schema current."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and (url.database or "") not in ("", ":memory:"):
        with _file_lock(Path(url.database).expanduser().with_name(Path(url.database).name + ".lock")):
            # A connection of its own whose transaction starts with BEGIN IMMEDIATE (pysqlite would
            # otherwise start none before DDL: a crash could leave half a migration).
            locked = create_engine(url, poolclass=NullPool, connect_args={"timeout": 30, "isolation_level": None})
            _sqlite_pragmas(locked, memory=False)

            @event.listens_for(locked, "begin")
            def _immediate(conn: Connection) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

            try:
                with locked.begin() as conn:
                    upgrade_schema(conn, revision)
            finally:
                locked.dispose()
        return
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_SCHEMA_LOCK})
        upgrade_schema(conn, revision)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing, left in place), held until the block
    ends; released by the OS if the process dies. Without ``fcntl`` (Windows) it holds nothing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not a supported server platform
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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
        "cost_model_version": response.cost_model_version,
    }


def _stale(row_version: int | None) -> tuple[int, bool]:
    """(the cost-model version of a stored answer, 0 when unknown; whether it is older than the
    planner's current one)."""
    v = row_version or 0
    return v, v != version.COST_MODEL_VERSION


def make_read_engine(engine: Engine, url: str, threads: int = STORE_THREADS) -> Engine:
    """The engine of the cache hits' one-statement reads (``Store.get_plan_body``). SQLite: the
    store's engine (pysqlite begins no transaction for a SELECT). A server database: connections of
    their own in autocommit, one per store thread, not pinged on checkout and not rolled back on
    return, so a hit is one round trip (the store's engine adds a pre-ping (psycopg: ``;``), a
    ``BEGIN`` and a ``ROLLBACK``: four). A connection the server closed is replaced on the read
    that finds it so (``Store._plan_row``)."""
    if engine.dialect.name == "sqlite":
        return engine
    return create_engine(
        url,
        isolation_level="AUTOCOMMIT",
        pool_size=threads,
        max_overflow=0,
        pool_reset_on_return=None,
        connect_args=_server_connect_args(url),
    )


class StoreThreads:
    """``size`` threads that run the store's calls for event loops: a call is a queue entry and a
    future of the caller's loop, resolved with ``call_soon_threadsafe``. The least a thread hop costs
    the event loop (``run_in_executor`` adds a ``concurrent.futures.Future`` with its lock and
    condition and chains it to an asyncio future: a fifth of the loop's time per cache hit)."""

    def __init__(self, size: int) -> None:
        self._queue: SimpleQueue = SimpleQueue()
        self._threads = [Thread(target=self._work, name=f"meshplan-store_{i}", daemon=True) for i in range(size)]
        for thread in self._threads:
            thread.start()

    async def run(self, fn: Callable[[], R]) -> R:
        future = asyncio.get_running_loop().create_future()
        self._queue.put((fn, future))
        return await future

    def shutdown(self) -> None:
        """Stop the threads once the calls queued so far are done (not waited for)."""
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, future = item
            try:
                result, error = fn(), None
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits
                future.get_loop().call_soon_threadsafe(_settle, future, result, error)
            del item, fn, future, result, error


def _settle(future: asyncio.Future, result: object, error: BaseException | None) -> None:
    if future.cancelled():  # the caller went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Store:
    """Plans, profiles and runs. Every write commits before it returns."""

    def __init__(self, url: str, threads: int = STORE_THREADS) -> None:
        self.url = url
        self.threads = threads
        try:
            self.engine = make_engine(url)
            migrate(self.engine)
        except (ModuleNotFoundError, NoSuchModuleError) as exc:
            raise MeshplanError(
                "MESHPLAN_DATABASE_URL",
                f"no database driver for {make_url(url).drivername!r} ({exc})",
                "install the driver the URL names (e.g. pip install 'psycopg[binary]' for postgresql+psycopg)",
            ) from None
        except (OperationalError, ProgrammingError, OSError) as exc:
            raise MeshplanError(
                "MESHPLAN_DATABASE_URL",
                f"cannot open the database {make_url(url).render_as_string(hide_password=True)} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
                "check the URL, that the server is up, and that the file's folder is writable",
            ) from None
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        self._executor: StoreThreads | None = None
        self._plans = PlanRow.__table__
        self.read_engine = make_read_engine(self.engine, url, threads)
        t = self._plans
        lookup = select(t.c.created_at, t.c.cost_model_version, t.c.document).where(t.c.id == bindparam("id"))
        self._lookup_sql = str(lookup.compile(dialect=self.read_engine.dialect))
        self._positional = self.read_engine.dialect.positional

    async def call(self, fn: Callable[..., R], *args: object) -> R:
        """Run ``fn(*args)`` (a store method: database access, (de)serialisation) in the store's own
        threads, off the event loop and apart from the request and solver pools."""
        if self._executor is None:
            self._executor = StoreThreads(self.threads)
        return await self._executor.run(functools.partial(fn, *args))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None
        if self.read_engine is not self.engine:
            self.read_engine.dispose()
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
        v, stale = _stale(row.cost_model_version)
        return StoredPlan(
            id=row.id,
            created_at=row.created_at,
            cached=True,
            cost_model_version=v,
            stale=stale,
            request=PlanRequest.model_validate_json(row.request_json),
            response=PlanResponse.model_validate_json(row.response_json),
        )

    def get_plan_body(self, plan_id: str, cached: bool = True) -> bytes | None:
        """The stored plan's ``StoredPlan`` JSON body (``cached`` as given): one lookup by key and the
        stored document, nothing parsed or validated. A row stored before the document column gets
        its document built from its JSON (the old way) and written back, once."""
        t = self._plans
        row = self._plan_row(plan_id)
        if row is None:
            return None
        created_at, row_version, document = row
        if document is None:
            stored = self.get_plan(plan_id)
            if stored is None:
                return None
            document = plan_document(stored)
            try:
                with self.engine.begin() as conn:
                    conn.execute(update(t).where(t.c.id == plan_id, t.c.document.is_(None)).values(document=document))
            except OperationalError:  # busy: the next read writes it back
                pass
        return plan_body(plan_id, created_at, cached, row_version, document)

    def _plan_row(self, plan_id: str) -> tuple[str, int | None, str | None] | None:
        """(created_at, cost_model_version, document) of a stored plan: one statement, compiled once,
        on a DBAPI connection of the read engine (no ORM, no SQLAlchemy statement per call). A
        connection the server has closed (restart, failover) is dropped and the read tried on the
        next one, until a fresh one (the pool holds at most ``pool.size()``)."""
        params = (plan_id,) if self._positional else {"id": plan_id}
        pool = self.read_engine.pool
        attempts = pool.size() + 1 if isinstance(pool, QueuePool) else 1
        for attempt in range(1, attempts + 1):
            conn = self.read_engine.raw_connection()
            try:
                cursor = conn.cursor()
                try:
                    cursor.execute(self._lookup_sql, params)
                    return cursor.fetchone()
                finally:
                    cursor.close()
            except self.read_engine.dialect.loaded_dbapi.Error as exc:
                if attempt == attempts or not self.read_engine.dialect.is_disconnect(exc, conn.dbapi_connection, None):
                    raise
                conn.invalidate(exc)
            finally:
                conn.close()
        return None  # not reached

    def put_plan_body(self, plan_id: str, request: PlanRequest, response: PlanResponse) -> tuple[bytes, bool]:
        """``put_plan``, answering with the ``StoredPlan`` JSON body (``cached`` false when this call
        stored it, true when another writer had)."""
        row, created = self._put_plan_row(plan_id, request, response)
        if not created:
            body = self.get_plan_body(plan_id)
            if body is not None:
                return body, False
        return plan_body(plan_id, row.created_at, False, row.cost_model_version, row.document or ""), True

    def put_plan(self, plan_id: str, request: PlanRequest, response: PlanResponse) -> tuple[StoredPlan, bool]:
        """Store a solved plan under ``plan_id`` (``request_key`` of the request and of the response's
        cost-model version); returns (the stored plan, whether it is new)."""
        row, created = self._put_plan_row(plan_id, request, response)
        if not created:
            existing = self.get_plan(plan_id)
            if existing is not None:
                return existing, False
        v, stale = _stale(response.cost_model_version)
        return StoredPlan(
            id=plan_id,
            created_at=row.created_at,
            cached=False,
            cost_model_version=v,
            stale=stale,
            request=request,
            response=response,
        ), True

    def _put_plan_row(self, plan_id: str, request: PlanRequest, response: PlanResponse) -> tuple[PlanRow, bool]:
        """Insert the plan's row; (the row, True), or (the row we tried, False) when another writer
        stored this id first."""
        created_at = utc_now()
        v, stale = _stale(response.cost_model_version)
        stored = StoredPlan(
            id=plan_id,
            created_at=created_at,
            cached=False,
            cost_model_version=v,
            stale=stale,
            request=request,
            response=response,
        )
        row = PlanRow(
            id=plan_id,
            created_at=created_at,
            request_json=canonical_json(request.model_dump(mode="json")),
            response_json=response.model_dump_json(),
            document=plan_document(stored),
            **_summary_of(response),
        )
        while not self._insert(row):
            with self.engine.connect() as conn:
                if conn.execute(select(self._plans.c.id).where(self._plans.c.id == plan_id)).first() is not None:
                    return row, False  # another writer stored it first
            # ... and it was deleted in between: insert again (a fresh row object: the session
            # that failed may have attached the old one).
            row = PlanRow(**{c.key: getattr(row, c.key) for c in PlanRow.__table__.columns})
        return row, True

    def list_plans(self, *, model: str | None, gpu: str | None, limit: int, offset: int) -> Page[PlanSummary]:
        query = select(PlanRow)
        if model:
            query = query.where(PlanRow.model == column_text(model))
        if gpu:
            query = query.where(PlanRow.gpu == column_text(gpu))
        with self._session() as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(
                query.order_by(PlanRow.created_at.desc(), PlanRow.id).limit(limit).offset(offset)
            ).all()
        items = [
            PlanSummary(
                **{c: getattr(r, c) for c in PlanSummary.model_fields if c not in ("cost_model_version", "stale")},
                **dict(zip(("cost_model_version", "stale"), _stale(r.cost_model_version))),
            )
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
        return StoredProfile(
            id=row.id, created_at=row.created_at, profile=Profile.model_validate_json(row.profile_json)
        )

    def list_profiles(self, *, model: str | None, limit: int, offset: int) -> Page[ProfileSummary]:
        query = select(ProfileRow)
        if model:
            query = query.where(ProfileRow.model == column_text(model))
        with self._session() as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(
                query.order_by(ProfileRow.created_at.desc(), ProfileRow.id).limit(limit).offset(offset)
            ).all()
        items = [
            ProfileSummary(id=r.id, created_at=r.created_at, model=r.model, device=r.device, source=r.source)
            for r in rows
        ]
        return Page[ProfileSummary](items=items, total=total, limit=limit, offset=offset)

    # ---- calibrations --------------------------------------------------------------------

    def put_calibration(self, calibration: Calibration) -> tuple[Calibration, bool]:
        """Store a calibration under its content hash (``calibration_id``); returns it with its ``id``
        (and ``created_at``, kept when the calibration has one), and whether it is new. A calibration
        stored before is returned as stored, unchanged."""
        cal_id = calibration_id(calibration)
        now = utc_now()
        stored = calibration.model_copy(update={"id": cal_id, "created_at": calibration.created_at or now})
        row = CalibrationRow(
            id=cal_id,
            created_at=now,
            gpu=column_text(stored.gpu),
            stack=column_text(stored.stack),
            runs=len(stored.runs),
            in_sample_mape=stored.in_sample_mape,
            cross_validated_mape=stored.cross_validated_mape,
            calibration_json=canonical_json(stored.model_dump(mode="json")),
        )
        if not self._insert(row):
            existing = self.get_calibration(cal_id)
            if existing is not None:  # stored before (calibrations are never changed or deleted)
                return existing, False
        return stored, True

    def get_calibration(self, cal_id: str) -> Calibration | None:
        with self._session() as session:
            row = session.get(CalibrationRow, cal_id)
        return None if row is None else Calibration.model_validate_json(row.calibration_json)

    def list_calibrations(
        self, *, gpu: str | None, stack: str | None, limit: int, offset: int
    ) -> Page[CalibrationSummary]:
        query = select(CalibrationRow)
        if gpu:
            query = query.where(CalibrationRow.gpu == column_text(gpu))
        if stack:
            query = query.where(CalibrationRow.stack == column_text(stack))
        with self._session() as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(
                query.order_by(CalibrationRow.created_at.desc(), CalibrationRow.id).limit(limit).offset(offset)
            ).all()
        items = [CalibrationSummary(**{c: getattr(r, c) for c in CalibrationSummary.model_fields}) for r in rows]
        return Page[CalibrationSummary](items=items, total=total, limit=limit, offset=offset)

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
            rows = session.scalars(
                select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id).limit(limit).offset(offset)
            ).all()
        items = [RunSummary(**{c: getattr(r, c) for c in RunSummary.model_fields}) for r in rows]
        return Page[RunSummary](items=items, total=total, limit=limit, offset=offset)
