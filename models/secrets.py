"""Secrets generated for one deployment and kept in its database, where every worker reads them.

One row per secret, by name; today one: ``fingerprint_key``, the HMAC key of the parity fingerprints
and output hashes (``worker.fingerprint_key``). Values are never logged or printed.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime


class DeploymentSecret(Base):
    """Written once (``billing db upgrade``) and only read afterwards."""

    __tablename__ = "deployment_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
