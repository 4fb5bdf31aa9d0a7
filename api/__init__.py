"""meshplan's service side: the FastAPI app, storage, exporters, dashboard, and the CLI entry point."""
