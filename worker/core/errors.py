"""The one exception hierarchy of the worker.

``BillingError`` is the root. Subclasses of ``InputError`` describe bad input from the gateway: they
are never retried and end as a dead letter (or a one-line CLI error) with their message as the reason.
What may succeed on retry (a lost connection, a lock timeout) is decided by ``transient.is_transient``
from the database's and Redis's own exceptions; the worker raises none of its own.
"""


class BillingError(Exception):
    """Root of every error the worker raises on purpose."""


class InputError(BillingError):
    """Input that cannot be used as given; the message says which part and why."""


class FrameError(InputError):
    """One SSE frame could not be decoded.

    ``index`` is the 0-based position of the event in the body, ``reason`` a short, stable text.
    """

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"frame {index}: {reason}")
        self.index = index
        self.reason = reason


class RequestMetaError(InputError):
    """The request metadata is missing a field or holds a wrong type."""


class RequestIdReused(InputError):
    """A call's request entry is not the one its reservation was recorded from: the gateway
    published a second call under a request id already used (``request.request_digest``)."""

    def __init__(self, request_id: str) -> None:
        super().__init__("request_id reused by a different call")
        self.request_id = request_id


class PriceBookError(InputError):
    """A price book file is malformed."""


class VocabularyError(BillingError):
    """A shipped tiktoken vocabulary is missing or fails its checksum."""


class ConfigError(BillingError):
    """The process is configured so that it cannot do its work (a missing key, say)."""


class LedgerError(BillingError):
    """A ledger operation was refused (e.g. a hold repeated with a different amount)."""
