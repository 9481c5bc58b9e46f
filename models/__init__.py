"""The billing database schema (SQLAlchemy 2.0 typed models); migrations live in ``migrations``."""

from models.accounts import Account, LedgerAccount, LedgerKind, ledger_account_name
from models.alerts import AlertEvent, AlertKind, OutboxAlert, OutboxStatus
from models.anomalies import ANOMALY_KINDS, Anomaly, AnomalyKind
from models.base import NAMING_CONVENTION, Base
from models.budgets import AuthorizationCorrection, Budget
from models.calibration import CalibrationFactor
from models.credits import AccountCredit, CreditKind, CreditLimit
from models.failures import Action, Failure
from models.invoices import CustomerDetails, Invoice
from models.ledger import Direction, Entry, Kind, LedgerCheck, Transaction
from models.parity import ParityPair, Verdict
from models.prices import PriceRow
from models.reservations import OPEN_STATUSES, Reservation, Status
from models.rollup import CALL_COLUMNS, CALL_STATE_KEY, MONEY_COLUMNS, CallsDaily, MoneyDaily
from models.secrets import DeploymentSecret
from models.upstream import CallRoute, UpstreamCost, UpstreamGap, UpstreamRevision, UpstreamUsage
from models.usage import UsageRecord

__all__ = [
    "ANOMALY_KINDS",
    "CALL_COLUMNS",
    "CALL_STATE_KEY",
    "MONEY_COLUMNS",
    "NAMING_CONVENTION",
    "OPEN_STATUSES",
    "Account",
    "AccountCredit",
    "Action",
    "AlertEvent",
    "AlertKind",
    "Anomaly",
    "AnomalyKind",
    "AuthorizationCorrection",
    "Base",
    "Budget",
    "CalibrationFactor",
    "CallRoute",
    "CallsDaily",
    "CreditKind",
    "CreditLimit",
    "CustomerDetails",
    "DeploymentSecret",
    "Direction",
    "Entry",
    "Failure",
    "Invoice",
    "Kind",
    "LedgerAccount",
    "LedgerCheck",
    "LedgerKind",
    "MoneyDaily",
    "OutboxAlert",
    "OutboxStatus",
    "ParityPair",
    "PriceRow",
    "Reservation",
    "Status",
    "Transaction",
    "UpstreamCost",
    "UpstreamGap",
    "UpstreamRevision",
    "UpstreamUsage",
    "UsageRecord",
    "Verdict",
    "ledger_account_name",
]
