"""deploy/compose/compose.yaml and the Dockerfile, checked without Docker.

The compose file must be valid Compose (the Compose Specification's JSON schema, vendored in
schemas/compose-spec.json), name only pinned images or the image the Dockerfile here builds,
set only variables a settings model reads, declare every volume it mounts, start each
service after what it needs is healthy, and keep every secret out of itself: they are
generated into the `secrets` volume by `afr secrets init`. The Dockerfile must run as a
non-root user, carry a health check, copy only sources that exist and the build context
lets in, and hold no secret-looking ENV or ARG. tests/docker/test_compose_stack.py runs the
stack itself where Docker runs.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from afr.grafana.panels import PLUGIN_ID, PLUGIN_VERSION
from afr.secrets_cli import (
    CLICKHOUSE_READER,
    CLICKHOUSE_WRITER,
    COLLECTOR_KEY,
    GENERATED,
    GRAFANA_CLICKHOUSE_PASSWORD,
)
from tests.deploy.settings_env import MODELS, env_names

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
SPEC = ROOT / "schemas" / "compose-spec.json"

SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL|(^|_)KEY$|API_KEY|PRIVATE", re.I)
SECRETS_VOLUME = "secrets"
SECRET_FILES = {*GENERATED, COLLECTOR_KEY}
"""Every file `afr secrets init` creates."""


def _compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return document


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _environment(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        return dict(str(item).partition("=")[::2] for item in environment)
    return {str(k): "" if v is None else str(v) for k, v in environment.items()}


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool

    @property
    def named_volume(self) -> bool:
        return not self.source.startswith((".", "/", "~"))


def _mounts(service: dict[str, Any]) -> list[Mount]:
    mounts = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            mounts.append(
                Mount(str(entry["source"]), str(entry["target"]), bool(entry.get("read_only")))
            )
            continue
        source, target, *mode = str(entry).split(":")
        mounts.append(Mount(source, target, "ro" in "".join(mode).split(",")))
    return mounts


def _afr_services() -> dict[str, dict[str, Any]]:
    """The services running the image built from the Dockerfile here."""
    return {name: s for name, s in _services().items() if "build" in s}


def _command(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return command.split() if isinstance(command, str) else [str(part) for part in command]


def _project_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


# -- the compose file -------------------------------------------------------------------------


def test_the_compose_file_follows_the_compose_specification() -> None:
    spec = json.loads(SPEC.read_text())
    assert spec["title"] == "Compose Specification"
    validator = jsonschema.Draft7Validator(spec)
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(_compose())]
    assert errors == []
    # The schema catches what a typo does: an unknown key is refused, not ignored.
    broken = copy.deepcopy(_compose())
    broken["services"]["collector"]["healthcheck"]["intreval"] = "10s"
    assert not validator.is_valid(broken)


def test_every_image_is_pinned_or_built_from_the_dockerfile_here() -> None:
    for name, service in _services().items():
        image = str(service["image"])
        if "build" in service:
            build = service["build"]
            context = (COMPOSE_DIR / build["context"]).resolve()
            assert (context / build.get("dockerfile", "Dockerfile")) == DOCKERFILE, name
            assert image == f"afr-server:{_project_version()}", f"{name}: tagged with the version"
            continue
        repository, _, tag = image.rpartition(":")
        assert repository, f"{name}: {image} has no tag"
        assert re.fullmatch(r"\d+(\.\d+){2,}(-[\w.]+)?", tag), f"{name}: {image} is not pinned"


def test_the_afr_services_set_only_variables_their_settings_read() -> None:
    readers = {
        "up": env_names(MODELS["collector"]),
        "worker": env_names(MODELS["worker"]),
        "secrets": {},  # afr secrets init reads no settings
    }
    services = _afr_services()
    assert {_command(s)[1] for s in services.values()} == set(readers)
    for name, service in services.items():
        reads = readers[_command(service)[1]]
        for variable in _environment(service):
            if variable.startswith(("AFR_", "OTEL_")):
                assert variable in reads, f"{name} sets {variable}, which nothing reads"


def test_grafana_is_given_exactly_the_variables_its_provisioning_reads() -> None:
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    referenced = {
        match
        for path in provisioning.rglob("*.yaml")
        for match in re.findall(r"\$\{(AFR_\w+)\}", path.read_text())
    }
    grafana = _services()["grafana"]
    given = {v for v in _environment(grafana) if v.startswith("AFR_")}
    # The password is exported by the entrypoint, from the secret file.
    entrypoint = " ".join(grafana["entrypoint"])
    assert f"/run/afr-secrets/{GRAFANA_CLICKHOUSE_PASSWORD}" in entrypoint
    assert "export AFR_CLICKHOUSE_PASSWORD=" in entrypoint
    assert entrypoint.rstrip().endswith("exec /run.sh"), "the image's own entrypoint runs"
    assert given | {"AFR_CLICKHOUSE_PASSWORD"} == referenced
    assert _environment(grafana)["AFR_CLICKHOUSE_USER"] == CLICKHOUSE_READER
    environment = _environment(grafana)
    # Pinned: the plugin's macros and query generator are the ones afr reproduces and tests.
    assert environment["GF_PLUGINS_PREINSTALL_SYNC"] == f"{PLUGIN_ID}@{PLUGIN_VERSION}"
    assert "GF_INSTALL_PLUGINS" not in environment, "deprecated since Grafana 12.1"
    # the provisioning directory, and the dashboards where its file provider looks
    mounts = {m.source: m.target for m in _mounts(grafana)}
    assert mounts["../grafana/provisioning"] == "/etc/grafana/provisioning"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "afr.yaml").read_text())[
        "providers"
    ]
    assert mounts["../../dashboards"] == provider["options"]["path"]
    assert (COMPOSE_DIR / "../../dashboards").resolve() == ROOT / "dashboards"


def test_every_mounted_volume_is_declared_and_every_bind_mount_exists() -> None:
    document = _compose()
    declared = set(document.get("volumes") or {})
    used: set[str] = set()
    for name, service in document["services"].items():
        for mount in _mounts(service):
            if mount.named_volume:
                assert mount.source in declared, f"{name} mounts undeclared volume {mount.source}"
                used.add(mount.source)
            else:
                assert (COMPOSE_DIR / mount.source).exists(), f"{name}: {mount.source}"
        for secret in service.get("secrets", []):
            source = secret if isinstance(secret, str) else secret["source"]
            assert source in (document.get("secrets") or {}), f"{name}: secret {source}"
    assert used == declared, "every declared volume is used"
    assert {"collector-data", "worker-state", "clickhouse-data", SECRETS_VOLUME} <= declared


def test_secrets_are_generated_into_a_volume_and_never_written_here() -> None:
    services = _services()
    writers = [
        name
        for name, s in services.items()
        for m in _mounts(s)
        if m.source == SECRETS_VOLUME and not m.read_only
    ]
    assert writers == ["secrets"], "only the init service writes the secrets volume"
    init = _command(services["secrets"])
    assert init[:4] == ["afr", "secrets", "init", "/run/afr-secrets"]
    for name, service in services.items():
        text = json.dumps(service)
        for secret_file in re.findall(r"/run/afr-secrets/(\w+)", text):
            assert secret_file in SECRET_FILES, f"{name} reads {secret_file}, never created"
        if SECRETS_VOLUME in {m.source for m in _mounts(service)}:
            assert "secrets" in service.get("depends_on", {}) or name == "secrets"
        for variable, value in _environment(service).items():
            names_a_place = variable.endswith(("__FILE", "_DIR"))  # where secrets are
            if SECRET_NAME.search(variable) and not names_a_place:
                pytest.fail(f"{name} sets the secret-looking {variable} in the compose file")
            if value.startswith(("http://", "https://")):
                assert urlsplit(value).password is None, f"{name}: {variable} holds a password"


def test_the_services_read_the_secrets_where_they_are_mounted() -> None:
    services = _services()
    mount_of = {name: {m.source: m.target for m in _mounts(s)} for name, s in services.items()}
    collector, worker = _environment(services["collector"]), _environment(services["worker"])
    assert collector["AFR_SECRETS_DIR"] == mount_of["collector"][SECRETS_VOLUME]
    assert worker["AFR_WORKER_SECRETS_DIR"] == mount_of["worker"][SECRETS_VOLUME]
    # the init service creates the key in the key store the collector uses
    init = _command(services["secrets"])
    data_dir = init[init.index("--data-dir") + 1]
    assert data_dir == collector["AFR_DATA_DIR"]
    assert mount_of["secrets"]["collector-data"] == mount_of["collector"]["collector-data"]
    # and ClickHouse's users file lands in the users.d ClickHouse reads
    users_file = PurePosixPath(init[init.index("--clickhouse-users") + 1])
    assert str(users_file.parent) == mount_of["secrets"]["clickhouse-users"]
    assert mount_of["clickhouse"]["clickhouse-users"] == "/etc/clickhouse-server/users.d"
    url = urlsplit(collector["AFR_CLICKHOUSE_URL"])
    assert (url.username, url.hostname, url.port) == (CLICKHOUSE_WRITER, "clickhouse", 8123)
    assert worker["AFR_WORKER_COLLECTOR_URL"] == "http://collector:4318"
    assert worker["AFR_WORKER_COLLECTOR_OTLP_ENDPOINT"] == "http://collector:4317"


def test_services_start_after_what_they_need_is_healthy() -> None:
    services = _services()
    for name, service in services.items():
        if name == "secrets":
            assert service["healthcheck"] == {"disable": True}
            assert service["restart"] == "no"
            continue
        test = service.get("healthcheck", {}).get("test")
        assert test, f"{name} has a health check"
        for needed, condition in service.get("depends_on", {}).items():
            expected = (
                "service_completed_successfully" if needed == "secrets" else "service_healthy"
            )
            assert condition == {"condition": expected}, f"{name} -> {needed}"
    assert set(services["collector"]["depends_on"]) == {"secrets", "clickhouse"}
    assert set(services["worker"]["depends_on"]) == {"secrets", "collector"}
    assert set(services["grafana"]["depends_on"]) == {"secrets", "clickhouse"}
    # the health checks probe the ports the services listen on
    assert "4318/healthz" in " ".join(services["collector"]["healthcheck"]["test"])
    worker_port = _environment(services["worker"])["AFR_WORKER_PORT"]
    assert f"{worker_port}/healthz" in " ".join(services["worker"]["healthcheck"]["test"])


# -- the Dockerfile ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    stage: int


def _dockerfile() -> list[Instruction]:
    """Instructions with their continuation lines joined, comments and directives dropped."""
    instructions: list[Instruction] = []
    stage, pending = -1, ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        pending += stripped.removesuffix("\\").strip() + " "
        if stripped.endswith("\\"):
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        instructions.append(Instruction(keyword.upper(), arguments.strip(), stage))
    return instructions


def _final_stage() -> list[Instruction]:
    instructions = _dockerfile()
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def test_the_image_runs_as_a_non_root_user() -> None:
    users = [i.arguments for i in _final_stage() if i.keyword == "USER"]
    assert users, "the final stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]


def test_the_image_has_a_health_check_on_the_collectors_healthz() -> None:
    checks = [i.arguments for i in _final_stage() if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    assert checks[0].upper() != "NONE"
    assert "/healthz" in checks[0]
    assert "4318" in checks[0], "the collector's HTTP port, the default command's"
    (command,) = [i.arguments for i in _final_stage() if i.keyword == "CMD"]
    assert json.loads(command) == ["afr", "up", "--no-worker"]


def test_the_build_is_multi_stage_on_a_pinned_python_311() -> None:
    instructions = _dockerfile()
    args = {
        name: value
        for i in instructions
        if i.keyword == "ARG"
        for name, _, value in [i.arguments.partition("=")]
    }
    bases = [i.arguments.split()[0] for i in instructions if i.keyword == "FROM"]
    assert len(bases) >= 2, "builder and runtime stages"
    for base in bases:
        image = args.get(base.strip("${}"), base)
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image), image
    runs = " ".join(i.arguments for i in instructions if i.keyword == "RUN")
    assert "pip wheel" in runs
    assert "--no-index" in runs, "the runtime installs the built wheels only"


def test_every_copied_source_exists_and_the_build_context_lets_it_in() -> None:
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*", "the context is an allow-list: .afr/ keys and .venv stay out"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [i.arguments.split() for i in _dockerfile() if i.keyword in ("COPY", "ADD")]
    assert copies
    for words in copies:
        if any(word.startswith("--from=") for word in words):
            continue
        sources = [w for w in words[:-1] if not w.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file"
            parts = PurePosixPath(source).parts
            assert any("/".join(parts[:n]) in allowed for n in range(1, len(parts) + 1)), (
                f"COPY {source}: .dockerignore keeps it out of the context"
            )


def test_no_secret_is_baked_into_the_image() -> None:
    for instruction in _dockerfile():
        if instruction.keyword not in ("ENV", "ARG"):
            continue
        names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", " " + instruction.arguments)
        if instruction.keyword == "ARG" and "=" not in instruction.arguments:
            names = [instruction.arguments.split()[0]]
        for name in names:
            assert not SECRET_NAME.search(name), f"{instruction.keyword} {name}"
    readers = set(env_names(MODELS["collector"])) | set(env_names(MODELS["worker"]))
    for instruction in _final_stage():
        if instruction.keyword == "ENV":
            for name in re.findall(r"(AFR_\w+)=", instruction.arguments):
                assert name in readers, f"ENV {name}: nothing reads it"
