"""Which migration revision a database is at, against the head this code was written for.

``billing doctor`` reports the difference; ``billing report`` refuses a database that is not at head
(its queries read every table the migrations create). Reads only: nothing here migrates.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from sqlalchemy import Connection


@cache
def _script() -> tuple[frozenset[str], frozenset[str]]:
    """(every revision, the heads) of the migrations shipped with this code, read once a process."""
    from alembic.script import ScriptDirectory

    from worker.db.engine import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    known = frozenset(revision.revision for revision in script.walk_revisions())
    return known, frozenset(script.get_heads())


def code_heads() -> frozenset[str]:
    """The head revisions of the migrations shipped with this code."""
    return _script()[1]


@dataclass(frozen=True, slots=True)
class Revisions:
    current: frozenset[str]
    heads: frozenset[str]
    known: frozenset[str]

    @property
    def at_head(self) -> bool:
        return self.current == self.heads

    @property
    def ahead(self) -> bool:
        """The database carries a revision this code does not know: a newer release migrated it."""
        return bool(self.current - self.known)

    def shown(self) -> str:
        return ", ".join(sorted(self.current)) or "nothing (not migrated)"

    def heads_shown(self) -> str:
        return ", ".join(sorted(self.heads))


def revisions(conn: Connection) -> Revisions:
    """The database's current revisions (``alembic_version``) and this code's heads."""
    from alembic.runtime.migration import MigrationContext

    current = frozenset(MigrationContext.configure(conn).get_current_heads())
    known, heads = _script()
    return Revisions(current, heads, known)
