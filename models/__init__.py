"""The billing database schema (SQLAlchemy 2.0 typed models); migrations live in ``migrations``."""

from models.accounts import Account, LedgerAccount, LedgerKind, ledger_account_name
from models.base import NAMING_CONVENTION, Base
from models.failures import Action, Failure
from models.ledger import Direction, Entry, Kind, Transaction
from models.prices import PriceRow
from models.reservations import OPEN_STATUSES, Reservation, Status
from models.usage import UsageRecord

__all__ = [
    "NAMING_CONVENTION",
    "OPEN_STATUSES",
    "Account",
    "Action",
    "Base",
    "Direction",
    "Entry",
    "Failure",
    "Kind",
    "LedgerAccount",
    "LedgerKind",
    "PriceRow",
    "Reservation",
    "Status",
    "Transaction",
    "UsageRecord",
    "ledger_account_name",
]
