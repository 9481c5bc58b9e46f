"""The tests' uvicorn server in a thread: ``devtools.localservers.serving``."""

from devtools.localservers.serving import served

__all__ = ["served"]
