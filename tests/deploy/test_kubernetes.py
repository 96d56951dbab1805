"""deploy/kubernetes/, checked without a cluster: every manifest is valid against the
Kubernetes OpenAPI schemas (kubernetes-validate, which bundles them), and the manifests
agree with each other and with the code — images, the Secrets, ConfigMaps, volumes and
service accounts the workloads use, the settings they set, their probes and ports, the
nightly sweep's shards."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from afr.cli import build_parser
from replay_worker.eval_run import parse_shard
from tests.deploy.settings_env import MODELS, env_names

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
NAMESPACE = "afr"
PROJECT_IMAGE = "afr-server"  # the repository's Dockerfile
# Every feature used is GA from 1.33 on (backoffLimitPerIndex, FailIndex): the oldest
# version the manifests are for, and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.33", kubernetes_validate.utils.latest_version())
# Files kept out of kustomization.yaml on purpose: applying them would overwrite the real
# Secrets and evals with placeholders.
TEMPLATES = {"secrets.example.yaml", "evals.example.yaml"}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "CronJob", "Job", "DaemonSet"}

Doc = dict[str, Any]


def manifest_files() -> list[Path]:
    return sorted(p for p in ROOT.glob("*.yaml") if p.name != "kustomization.yaml")


def load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


@functools.cache
def documents() -> tuple[tuple[Path, Doc], ...]:
    """Every document of every manifest, templates included (parsed once: read-only)."""
    return tuple((path, doc) for path in manifest_files() for doc in load(path))


def kustomization() -> Doc:
    (doc,) = load(ROOT / "kustomization.yaml")
    return doc


def by_kind(kind: str) -> dict[str, Doc]:
    return {doc["metadata"]["name"]: doc for _, doc in documents() if doc["kind"] == kind}


def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    template: Doc = spec["template"]
    pod: Doc = template["spec"]
    return pod


def pod_labels(workload: Doc) -> dict[str, str]:
    spec: Doc = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    labels: dict[str, str] = spec["template"]["metadata"]["labels"]
    return labels


def workloads() -> dict[str, Doc]:
    return {doc["metadata"]["name"]: doc for _, doc in documents() if doc["kind"] in WORKLOAD_KINDS}


def containers(workload: Doc) -> Iterator[Doc]:
    pod = pod_spec(workload)
    yield from pod.get("initContainers", [])
    yield from pod["containers"]


def settings_model(container: Doc) -> str:
    """Which settings model the container's ``afr`` command reads."""
    args = container.get("args", [])
    return "collector" if args[:1] == ["up"] else "worker"


def env_value(container: Doc, name: str) -> str | None:
    for item in container.get("env", []):
        if item["name"] == name:
            value: str | None = item.get("value")
            return value
    return None


def secret_keys(secret: Doc) -> set[str]:
    return set(secret.get("data") or {}) | set(secret.get("stringData") or {})


def test_every_manifest_is_valid_against_the_kubernetes_schemas() -> None:
    seen = 0
    for path, doc in documents():
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(map(str, exc.path))
                pytest.fail(
                    f"{path.name} {doc['kind']}/{doc['metadata']['name']} ({version}):"
                    f" {where}: {exc.message}"
                )
            seen += 1
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, path.name
    assert seen >= 2 * 10


def test_the_kustomization_lists_every_manifest_and_pins_the_image() -> None:
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p.name for p in manifest_files()} - TEMPLATES
    assert {p.name for p in manifest_files()} >= TEMPLATES
    for name in listed:
        assert (ROOT / name).is_file(), name
    assert kustomization()["namespace"] == NAMESPACE
    (image,) = kustomization()["images"]
    assert image["name"] == PROJECT_IMAGE
    assert image.get("digest") or (image.get("newTag") and image["newTag"] != "latest")


def test_every_image_is_the_projects_or_pinned() -> None:
    for name, workload in workloads().items():
        for container in containers(workload):
            image = container["image"]
            pinned = "@sha256:" in image or (
                ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
            )
            assert image == PROJECT_IMAGE or pinned, f"{name}/{container['name']}: {image}"


def test_every_secret_configmap_volume_and_account_a_workload_uses_exists() -> None:
    secrets, config_maps = by_kind("Secret"), by_kind("ConfigMap")
    accounts, claims = by_kind("ServiceAccount"), by_kind("PersistentVolumeClaim")
    for name, workload in workloads().items():
        pod = pod_spec(workload)
        assert pod["serviceAccountName"] in accounts, name
        assert pod.get("automountServiceAccountToken") is False, name
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        templates = {
            c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])
        }
        for volume in volumes.values():
            if "secret" in volume:
                secret = secrets[volume["secret"]["secretName"]]
                for item in volume["secret"].get("items", []):
                    assert item["key"] in secret_keys(secret), (name, item["key"])
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, name
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, name
        for container in containers(workload):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in templates, (name, mount)
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps, name
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, name
            for item in container.get("env", []):
                ref = item.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    key = ref["secretKeyRef"]
                    assert key["key"] in secret_keys(secrets[key["name"]]), (name, key)
                if "configMapKeyRef" in ref:
                    key = ref["configMapKeyRef"]
                    assert key["key"] in config_maps[key["name"]]["data"], (name, key)


def mounted_secret_files(workload: Doc, container: Doc, directory: str) -> set[str]:
    """The file names of the Secret mounted at ``directory`` in ``container``."""
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"] == directory:
            source = volumes[mount["name"]]["secret"]
            if source.get("items"):
                return {item["path"] for item in source["items"]}
            return secret_keys(by_kind("Secret")[source["secretName"]])
    pytest.fail(f"nothing is mounted at {directory}")


def test_every_afr_setting_set_is_one_the_settings_read() -> None:
    """An AFR_* name the settings do not read is a setting silently left at its default:
    in env, in a ConfigMap given as envFrom, or as a file of the secrets directory."""
    read = {kind: env_names(model) for kind, model in MODELS.items()}
    config_maps = by_kind("ConfigMap")
    checked = 0
    for name, workload in workloads().items():
        for container in pod_spec(workload)["containers"]:
            model = settings_model(container)
            names = [item["name"] for item in container.get("env", [])]
            for source in container.get("envFrom", []):
                names += list(config_maps[source["configMapRef"]["name"]]["data"])
            secrets_dir = next(
                (
                    v
                    for n in ("AFR_SECRETS_DIR", "AFR_WORKER_SECRETS_DIR")
                    if (v := env_value(container, n))
                ),
                None,
            )
            assert secrets_dir is not None, f"{name}: secrets come from files"
            names += sorted(mounted_secret_files(workload, container, secrets_dir))
            for variable in names:
                if variable.startswith(("AFR_", "OTEL_")):
                    assert variable in read[model], f"{name}: {variable} is not a {model} setting"
                    checked += 1
    assert checked > 20


def test_secrets_are_files_never_values_in_the_manifests() -> None:
    for name, workload in workloads().items():
        for container in containers(workload):
            for item in container.get("env", []):
                assert not re.search(r"KEY|SECRET|PASSWORD|TOKEN|URL$", item["name"]) or (
                    item["name"].endswith(("_SECRETS_DIR", "COLLECTOR_URL"))
                ), f"{name}: {item['name']} belongs in a Secret"
    for secret in by_kind("Secret").values():
        for value in (secret.get("stringData") or {}).values():
            assert "REPLACE_ME" in value or value == "", "templates hold placeholders only"
        assert all(v == "" for v in (secret.get("data") or {}).values())


def test_probes_use_ports_the_containers_expose() -> None:
    probed = 0
    for name, workload in workloads().items():
        for container in pod_spec(workload)["containers"]:
            ports = {p["name"] for p in container.get("ports", [])} | {
                p["containerPort"] for p in container.get("ports", [])
            }
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = container.get(kind)
                if probe is None:
                    continue
                action = probe.get("httpGet") or probe.get("tcpSocket") or probe.get("grpc")
                assert action is not None and action["port"] in ports, (name, kind)
                if "httpGet" in probe:
                    path = probe["httpGet"]["path"]
                    if name == "afr-collector":
                        # A store outage is every replica's: only the log near its bound
                        # unreadies one, only a stopped thread restarts it.
                        wanted = "ready" if kind == "readinessProbe" else "live"
                        assert path == f"/healthz?probe={wanted}", (name, kind)
                    else:
                        assert path == "/healthz", (name, kind)
                probed += 1
            if workload["kind"] != "CronJob":
                assert {"readinessProbe", "livenessProbe"} <= set(container), name
    assert probed >= 5


def test_services_select_pods_and_ports_that_exist() -> None:
    pods = list(workloads().values())
    for name, service in by_kind("Service").items():
        selector = service["spec"]["selector"]
        (target,) = [w for w in pods if selector.items() <= pod_labels(w).items()]
        ports = {p["name"] for c in pod_spec(target)["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (name, port)
    collector = workloads()["afr-collector"]
    headless = by_kind("Service")[collector["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"


def test_pods_run_as_non_root_on_a_read_only_root_with_requests_and_limits() -> None:
    for name, workload in workloads().items():
        pod = pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in containers(workload):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), (name, bound)


def test_the_collector_keeps_one_write_ahead_log_per_replica() -> None:
    collector = workloads()["afr-collector"]
    assert collector["kind"] == "StatefulSet"
    (claim,) = collector["spec"]["volumeClaimTemplates"]
    (container,) = pod_spec(collector)["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    assert env_value(container, "AFR_DATA_DIR") == mount["mountPath"]


def test_the_nightly_sweep_is_one_indexed_job_whose_pods_cover_every_shard_once() -> None:
    cron = by_kind("CronJob")["afr-sweep"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["completionMode"] == "Indexed"
    count = job["completions"]
    assert job["parallelism"] == count > 1
    (container,) = pod_spec(cron)["containers"]
    args: list[str] = container["args"]
    assert container["command"] == ["afr"] and args[:2] == ["eval", "run"]
    shard_arg = args[args.index("--shard") + 1]
    assert shard_arg == f"$(JOB_COMPLETION_INDEX)/{count}"
    # Every pod of the Job names one slot: the Job's name, the same in a retried pod.
    slot_arg = args[args.index("--slot") + 1]
    (job_name,) = [e for e in container["env"] if f"$({e['name']})" == slot_arg]
    assert job_name["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['batch.kubernetes.io/job-name']"
    )
    # What each pod runs, as Kubernetes expands it, is a command afr accepts; the N pods
    # (JOB_COMPLETION_INDEX 0..N-1) run N different shards.
    shards = set()
    for index in range(count):
        expanded = [a.replace("$(JOB_COMPLETION_INDEX)", str(index)) for a in args]
        expanded = [a.replace(slot_arg, "afr-sweep-29410560") for a in expanded]
        parsed = build_parser().parse_args(expanded)
        assert parsed.slot == "afr-sweep-29410560"
        shards.add(parse_shard(parsed.shard))
    assert shards == {(i, count) for i in range(1, count + 1)}


def test_a_sweep_pod_is_retried_only_when_a_retry_can_help() -> None:
    """Failed evals are a result (exit 1: no rerun, the shard is failed); bad input
    (exit 2) fails the Job; runs that did not reach the collector (exit 3), a crash or a
    lost node are retried, within a per-shard limit."""
    job = by_kind("CronJob")["afr-sweep"]["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimitPerIndex"] >= 1
    actions = {
        tuple(rule["onExitCodes"]["values"]): rule["action"]
        for rule in job["podFailurePolicy"]["rules"]
        if "onExitCodes" in rule
    }
    assert actions == {(1,): "FailIndex", (2,): "FailJob"}
    assert pod_spec(by_kind("CronJob")["afr-sweep"])["restartPolicy"] == "Never"


def test_the_sweep_pods_share_the_workers_state_so_the_last_shard_completes_the_night() -> None:
    """ADR 26: each pod records its shard in the worker's state store and the last one
    writes the summary run; a pod with its own SQLite file would never see the others."""
    cron = by_kind("CronJob")["afr-sweep"]
    (sweep,) = pod_spec(cron)["containers"]
    directory = env_value(sweep, "AFR_WORKER_SECRETS_DIR")
    assert directory is not None
    assert "AFR_WORKER_STATE_URL" in mounted_secret_files(cron, sweep, directory)
    worker = by_kind("Deployment")["afr-worker"]
    (container,) = pod_spec(worker)["containers"]
    worker_directory = env_value(container, "AFR_WORKER_SECRETS_DIR")
    assert worker_directory is not None
    assert "AFR_WORKER_STATE_URL" in mounted_secret_files(worker, container, worker_directory)
    # One Secret holds it for both.
    volumes = {v["name"]: v for v in pod_spec(cron)["volumes"]}
    (mount,) = [m for m in sweep["volumeMounts"] if m["mountPath"] == directory]
    worker_volumes = {v["name"]: v for v in pod_spec(worker)["volumes"]}
    (worker_mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == worker_directory]
    assert (
        volumes[mount["name"]]["secret"]["secretName"]
        == worker_volumes[worker_mount["name"]]["secret"]["secretName"]
    )
