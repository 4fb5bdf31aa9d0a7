"""One router per resource, joined under /v1 by ``api.app``."""
