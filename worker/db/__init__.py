"""The database plumbing below every package that reads or writes the database: engines and
sessions (``engine``), many rows in one statement (``bulk``), per-dialect statement helpers
(``dialect``). Nothing here knows the ledger's rules."""
