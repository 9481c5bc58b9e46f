"""The deployment files, checked against the code (no Docker engine needed).

Every ``billing …`` command the compose file runs must parse in the real click tree, every ``celery
-A`` target must import to a Celery app, and every variable set in the compose file or .env.example
must be one the code reads (``worker.config.ENV_VARS``), which in turn must be complete.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from celery import Celery

from devtools.localservers.ports import free_port
from tests.conftest import REDIS_URL
from worker.cli import main
from worker.config import ENV_VARS, Settings

ROOT = Path(__file__).resolve().parents[2]
BILLING_SERVICES = ("migrate", "worker", "beat", "metrics")
# Read by the official postgres image, not by us; allowed only in that service's environment.
POSTGRES_IMAGE_VARS = {"POSTGRES_USER", "POSTGRES_DB", "POSTGRES_PASSWORD"}
# Knobs of `make demo`, not deployment settings.
NOT_SETTINGS = {"devtools/demo.py", "devtools/demo_gateway.py"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def env_example() -> dict[str, str]:
    """Active assignments of .env.example."""
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = re.match(r"^([A-Z_][A-Z0-9_]*)=(.*)$", line)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def env_example_names() -> set[str]:
    """Every name .env.example mentions, active or commented out."""
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^#?\s*([A-Z_][A-Z0-9_]*)=", text, re.MULTILINE))


def commands(services: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Every argv a service runs: its command and its healthcheck."""
    found = []
    for name, service in services.items():
        command = service.get("command")
        if command:
            found.append((name, shlex.split(command) if isinstance(command, str) else command))
        test = service.get("healthcheck", {}).get("test")
        if isinstance(test, list) and test[0] == "CMD":
            found.append((name, test[1:]))
        elif isinstance(test, list) and test[0] == "CMD-SHELL":
            found.extend((name, argv) for argv in shell_commands(test[1]))
        elif isinstance(test, str):
            found.extend((name, argv) for argv in shell_commands(test))
    return found


def shell_commands(line: str) -> list[list[str]]:
    """The argv of each command of a shell line of commands joined by ``&&``."""
    words = shlex.split(line.replace("$$", "$"))
    argvs: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            argvs.append([])
        else:
            argvs[-1].append(word)
    return argvs


def test_services_and_persistence(compose, services) -> None:
    assert set(services) == {"redis", "postgres", *BILLING_SERVICES}
    redis_args = services["redis"]["command"]
    assert redis_args[:1] == ["redis-server"]
    assert redis_args[redis_args.index("--appendonly") + 1] == "yes"
    assert redis_args[redis_args.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    assert any("/var/lib/postgresql/data" in v for v in services["postgres"]["volumes"])
    named = set(compose["volumes"])
    for service in services.values():
        for volume in service.get("volumes", []):
            assert volume.split(":", 1)[0] in named, volume


def test_billing_services_share_the_image_and_read_dotenv(services) -> None:
    for name in BILLING_SERVICES:
        service = services[name]
        assert service["env_file"] == ".env", name
        assert service["build"] == "." and service["image"] == "billing-worker:local", name
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["command"] == ["billing", "db", "upgrade"]


def test_healthchecks_everywhere_but_the_one_shot(services) -> None:
    for name, service in services.items():
        if name == "migrate":
            continue  # runs once; the others wait for it to complete successfully
        check = service.get("healthcheck")
        assert check and check.get("test"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_start_order(services) -> None:
    def needs(name: str) -> dict[str, str]:
        return {k: v["condition"] for k, v in services[name]["depends_on"].items()}

    assert needs("migrate") == {"postgres": "service_healthy"}
    assert needs("worker") == {
        "redis": "service_healthy",
        "postgres": "service_healthy",
        "migrate": "service_completed_successfully",
    }
    assert needs("beat")["migrate"] == "service_completed_successfully"
    assert needs("beat")["redis"] == "service_healthy"
    assert needs("metrics") == {"redis": "service_healthy"}


def test_worker_scales_and_beat_does_not(services) -> None:
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert "replicas" not in worker.get("deploy", {})
    assert services["beat"]["deploy"]["replicas"] == 1
    for service in services.values():  # a fixed host port may only be bound to loopback, once
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), port


def _resolve(argv: list[str]) -> click.Command:
    """Walk ``billing …`` down the click groups, then parse the rest as the leaf would."""
    command: click.Command = main
    ctx = click.Context(main, info_name="billing")
    args = list(argv[1:])
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        name = args.pop(0)
        sub = command.get_command(ctx, name)
        assert sub is not None, f"`{' '.join(argv)}`: no command {name!r}"
        ctx = click.Context(sub, info_name=name, parent=ctx)
        command = sub
    assert not isinstance(command, click.Group), f"`{' '.join(argv)}` names a group"
    command.make_context(command.name or "", args, parent=ctx.parent)  # raises on a bad option
    return command


def test_every_billing_command_exists(services) -> None:
    seen = set()
    for _service, argv in commands(services):
        if argv[0] == "billing":
            seen.add(_resolve(argv).name)
    assert {"upgrade", "serve", "doctor"} <= seen


def test_every_celery_target_imports(services) -> None:
    seen = set()
    for service, argv in commands(services):
        if argv[0] != "celery":
            continue
        target = argv[argv.index("-A") + 1]
        module_name, _, attribute = target.partition(":")
        module = importlib.import_module(module_name)
        app = getattr(module, attribute or "app", None) or getattr(module, "celery", None)
        assert isinstance(app, Celery), f"{service}: {target} is not a Celery app"
        subcommand = argv[argv.index("-A") + 2]
        assert subcommand in ("worker", "beat", "inspect"), argv
        seen.add((service, subcommand))
    assert {("worker", "worker"), ("beat", "beat"), ("worker", "inspect")} <= seen


def test_variables_are_ones_the_code_reads(compose, services) -> None:
    known = set(ENV_VARS)
    text = (ROOT / "docker-compose.yml").read_text()
    interpolated = set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", text))
    for name, service in services.items():
        environment = service.get("environment", {})
        names = (
            set(environment)
            if isinstance(environment, dict)
            else {item.split("=", 1)[0] for item in environment}
        )
        allowed = known | (POSTGRES_IMAGE_VARS if name == "postgres" else set())
        assert names <= allowed, f"{name} sets {names - allowed}"
    example = env_example_names()
    assert example - known <= interpolated, f".env.example: unknown {example - known}"
    assert interpolated <= known | example, f"compose interpolates {interpolated - example}"
    assert interpolated - known <= POSTGRES_IMAGE_VARS


def test_env_example_documents_every_setting_and_parses() -> None:
    missing = set(ENV_VARS) - env_example_names()
    assert not missing, f".env.example does not mention {sorted(missing)}"
    settings = Settings.from_env(env_example())
    assert settings.broker_url != settings.redis_url or not settings.redis_cluster
    assert settings.database_url.startswith("postgresql://")


def test_env_example_metrics_dir_is_the_shared_volume(services) -> None:
    directory = env_example()["PROMETHEUS_MULTIPROC_DIR"]
    for name in ("worker", "metrics"):
        targets = [v.split(":")[1] for v in services[name]["volumes"]]
        assert directory in targets, f"{name} does not mount {directory}"


def test_env_vars_is_complete() -> None:
    """ENV_VARS names exactly what Settings.from_env reads (tests/test_config.py, which watches the
    names it looks up), and nothing else in the package reads another variable (so the check above
    is worth something)."""
    pattern = re.compile(
        r'(?:environ\.get\(|environ\[|getenv\(|setenv\(|environ\.pop\()\s*"([A-Z_][A-Z0-9_]*)"'
    )
    for path in sorted((ROOT / "worker").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in NOT_SETTINGS:
            continue
        for name in pattern.findall(path.read_text()):
            assert name in ENV_VARS, f"{relative} reads {name}, which is not in ENV_VARS"


# The crate versions native/Cargo.lock names are Debian bookworm's (scripts/ensure-crates).
CRATES_SUITE = "bookworm"


def base_images(dockerfile: str) -> list[str]:
    """The image of every ``FROM`` line (``--platform=`` and ``AS name`` dropped), continuations
    joined."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    images = []
    for line in joined.splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            images.append(next(w for w in words[1:] if not w.startswith("--")))
    return images


def pinned_to(image: str, suite: str) -> bool:
    """``image`` names one Python 3.11 slim build on ``suite`` by its tag (a digest may follow):
    a tag without the suite follows Debian's current release and moves under the build."""
    tag = image.partition("@")[0].partition(":")[2]
    return image.startswith("python:") and tag == f"3.11-slim-{suite}"


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("python:3.11-slim-bookworm", True),
        ("python:3.11-slim-bookworm@sha256:" + "0" * 64, True),
        ("python:3.11-slim", False),
        ("python:3.11-slim-trixie", False),
        ("python:slim", False),
        ("python", False),
        ("python@sha256:" + "0" * 64, False),
    ],
)
def test_pinned_to_reads_the_tag(image: str, pinned: bool) -> None:
    assert pinned_to(image, CRATES_SUITE) is pinned


def test_dockerfile_base_is_pinned_to_the_crates_suite() -> None:
    """Issue 39: ``python:3.11-slim`` moved to trixie and the Rust build lost bookworm's crates."""
    images = base_images((ROOT / "Dockerfile").read_text())
    assert images, "no FROM line"
    for image in images:
        assert pinned_to(image, CRATES_SUITE), f"{image} is not pinned to {CRATES_SUITE}"


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip install \.(\s|$)", text)
    assert re.search(r"^USER (?!root)", text, re.MULTILINE)
    for package in ("worker", "models", "migrations"):
        assert f"COPY {package} " in text


def test_the_worker_is_unhealthy_when_its_database_is(services, sqlite_url, monkeypatch) -> None:
    """Issue 39: a worker whose drains cannot reach the database answered ``inspect ping`` and
    stayed healthy. Its healthcheck's ``billing`` part, run here as compose runs it, passes with
    the database up and fails with it refusing connections."""
    from click.testing import CliRunner

    checks = [
        argv for name, argv in commands(services) if name == "worker" and argv[0] == "billing"
    ]
    assert len(checks) == 1, checks
    port = free_port()  # nothing listens there
    for variable in ENV_VARS:
        monkeypatch.delenv(variable, raising=False)
    base = {"BILLING_HASH_SALT": "a-secret-of-this-test-only", "REDIS_URL": REDIS_URL}
    runner = CliRunner()
    up = runner.invoke(main, checks[0][1:], env={**base, "DATABASE_URL": sqlite_url})
    assert up.exit_code == 0, up.output
    down_url = f"postgresql://billing:Pw7secret@127.0.0.1:{port}/billing"
    down = runner.invoke(main, checks[0][1:], env={**base, "DATABASE_URL": down_url})
    assert down.exit_code == 1, down.output
    assert f'127.0.0.1", port {port} failed: Connection refused' in down.output
    assert "Pw7secret" not in down.output
