"""Alembic migrations of the service's store, applied at start-up by ``api.store.Store``."""
