"""Settings declared once: the environment read through the declarations, the error messages a user
sees for bad values, and the README's settings table checked row by row against the declarations."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.alerts.config import AlertConfig
from worker.config import DECLARATIONS, ENV_VARS, RESOLVE_POLICIES, Settings, declaration

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| (.*?) \| (.*) \|$")
# The alert window and the digest interval are checked together (the digest a whole number of
# windows): their bounds alone are not what decides, see the test of the pair.
COUPLED = ("BILLING_ALERT_WINDOW_SECONDS", "BILLING_ALERT_DIGEST_SECONDS")
INTEGERS = [
    d
    for d in DECLARATIONS
    if isinstance(d.default, int)
    and not isinstance(d.default, bool)
    and d.minimum is not None
    and d.env not in COUPLED
]


class Recording(Mapping[str, str]):
    """An empty environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        raise KeyError(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(key)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def readme_rows() -> list[tuple[str, str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Configuration") :]
    section = section[: section.index("\n## ", 1)]
    return [m.groups() for line in section.splitlines() if (m := ROW.match(line))]


def test_readme_table_is_the_declarations() -> None:
    rows = readme_rows()
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names)), "a variable has two rows"
    assert set(names) - set(ENV_VARS) == set(), "rows for settings that do not exist"
    table = {name: (shown, meaning) for name, shown, meaning in rows}
    for d in DECLARATIONS:
        expected = f"| `{d.env}` | {d.shown} | {d.meaning} |"
        assert d.env in table, f"README has no row for {d.env}; add:\n{expected}"
        assert table[d.env] == (d.shown, d.meaning), f"README row differs; expected:\n{expected}"


def test_from_env_reads_exactly_the_declared_variables() -> None:
    env = Recording()
    assert Settings.from_env(env) == Settings()
    assert env.asked == set(ENV_VARS)
    assert len(ENV_VARS) == len(set(ENV_VARS)) == len(fields(Settings))


def test_unset_and_empty_mean_the_default() -> None:
    assert Settings.from_env(dict.fromkeys(ENV_VARS, "")) == Settings()


def test_the_broker_defaults_to_the_redis_url() -> None:
    url = "redis://events.internal:6380/3"
    assert Settings.from_env({"REDIS_URL": url}).broker_url == url
    assert Settings.from_env({"REDIS_URL": url, "CELERY_BROKER_URL": "redis://b/1"}).broker_url == (
        "redis://b/1"
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BILLING_PARTITIONS": "257"}, "BILLING_PARTITIONS must be at most 256, got 257"),
        ({"BILLING_PARTITIONS": "0"}, "BILLING_PARTITIONS must be at least 1, got 0"),
        ({"BILLING_BATCH_SIZE": "x"}, "BILLING_BATCH_SIZE must be an integer, got 'x'"),
        ({"BILLING_GRACE_SECONDS": "-1"}, "BILLING_GRACE_SECONDS must be at least 0, got -1"),
        (
            {"BILLING_DRIFT_WINDOW_SECONDS": "59"},
            "BILLING_DRIFT_WINDOW_SECONDS must be at least 60, got 59",
        ),
        ({"BILLING_DRAIN_MS": "99"}, "BILLING_DRAIN_MS must be at least 100, got 99"),
        ({"REDIS_CLUSTER": "Maybe"}, "REDIS_CLUSTER must be 1 or 0, got 'maybe'"),
        (
            {"BILLING_RESOLVE_POLICY": "refund"},
            "BILLING_RESOLVE_POLICY must be charge_delivered, release, charge_estimate or none",
        ),
        (
            {"BILLING_HASH_SALT": "short"},
            "BILLING_HASH_SALT must be a secret of at least 16 characters, or unset "
            "(then `billing db upgrade` generates one per deployment)",
        ),
    ],
)
def test_bad_values_are_refused_with_their_message(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        Settings.from_env(env)
    assert str(caught.value) == message


def test_values_are_read_into_their_types() -> None:
    settings = Settings.from_env(
        {
            "REDIS_CLUSTER": " Yes ",
            "BILLING_NON_STREAMABLE_MODELS": " o1, ,gpt-4o-audio,",
            "BILLING_RESOLVE_POLICY": "none",
            "BILLING_BATCH_BYTES": "1024",
            "BILLING_HASH_SALT": "s" * 16,
        }
    )
    assert settings.redis_cluster is True
    assert settings.non_streamable_models == ("o1", "gpt-4o-audio")
    assert settings.resolve_policy == "none"
    assert settings.batch_bytes == 1024
    assert "s" * 16 not in repr(settings)
    assert RESOLVE_POLICIES == ("charge_delivered", "release", "charge_estimate", "none")


@given(data=st.data())
def test_integers_are_accepted_exactly_within_their_bounds(data: st.DataObject) -> None:
    d = data.draw(st.sampled_from(INTEGERS))
    value = data.draw(st.integers(min_value=-(10**12), max_value=10**12))
    env = {d.env: str(value)}
    low, high = d.minimum, d.maximum
    if value < low:
        with pytest.raises(ValueError, match=f"^{d.env} must be at least {low}, got {value}$"):
            Settings.from_env(env)
    elif high is not None and value > high:
        with pytest.raises(ValueError, match=f"^{d.env} must be at most {high}, got {value}$"):
            Settings.from_env(env)
    else:
        read = Settings.from_env(env)
        changed = {f.name for f in fields(Settings) if getattr(read, f.name) != f.default}
        assert {getattr(read, f.name) for f in fields(Settings) if declaration(f) is d} == {value}
        assert changed <= {f.name for f in fields(Settings) if declaration(f) is d}


def test_alert_config_defaults_are_the_settings_defaults() -> None:
    assert AlertConfig() == AlertConfig.from_settings(Settings())


@given(window=st.integers(min_value=5, max_value=10_000), digest=st.integers(5, 100_000))
def test_the_digest_interval_must_be_a_whole_number_of_alert_windows(
    window: int, digest: int
) -> None:
    env = {COUPLED[0]: str(window), COUPLED[1]: str(digest)}
    if digest % window:
        with pytest.raises(ValueError, match=f"^{COUPLED[1]} must be a multiple of {COUPLED[0]}"):
            Settings.from_env(env)
    else:
        read = Settings.from_env(env)
        assert (read.alert_window_seconds, read.alert_digest_seconds) == (window, digest)
