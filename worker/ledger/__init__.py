"""The ledger: reservations, holds, settlements and failures over a double-entry ledger in SQL.

``operations`` moves money, ``balances`` reads it back, ``queries`` answers
support questions, ``database`` makes engines and runs migrations. Nothing here commits: the caller owns
the transaction.
"""
