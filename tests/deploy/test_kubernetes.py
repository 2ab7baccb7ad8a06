"""deploy/kubernetes, rendered by kubectl's kustomize, checked against the gateway it deploys.

checkov (``make k8s-check``, run by CI) checks the manifests against general policy; these tests
check what only this project knows: the ConfigMap is a config the gateway accepts, every key it
reads comes from the Secret, the probes answer on a real gateway run with that config, and the
selectors, ports and user id agree with each other and with the Dockerfile.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.config import ENV_PREFIX
from tests.ports import free_port
from tests.zygote import Forked, gateway_process

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None and not os.environ.get("CI"),
    reason="kubectl is not installed (CI installs it: .ci/run)",
)


def render(base: Path = ROOT / "deploy" / "kubernetes") -> dict[str, dict[str, Any]]:
    """The rendered objects by kind (the base has one of each), the Grafana dashboard's ConfigMap
    under "Dashboard" (deploy/grafana, checked by tests/deploy/test_dashboard.py)."""
    result = subprocess.run([KUBECTL or "kubectl", "kustomize", str(base)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    by_kind = {"Dashboard" if "grafana_dashboard" in doc["metadata"].get("labels", {}) else doc["kind"]: doc
               for doc in objects}
    assert len(by_kind) == len(objects), "one object of each kind expected"
    return by_kind


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return render()


def pod(rendered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return rendered["Deployment"]["spec"]["template"]


def container(rendered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (gateway,) = pod(rendered)["spec"]["containers"]
    return gateway


def env_names(value: Any) -> set[str]:
    """Every NAME the config reads as ``os.environ/NAME``."""
    if isinstance(value, dict):
        return set().union(*map(env_names, value.values()))
    if isinstance(value, list):
        return set().union(*map(env_names, value))
    return {value[len(ENV_PREFIX):]} if isinstance(value, str) and value.startswith(ENV_PREFIX) else set()


def raw_config(rendered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(rendered["ConfigMap"]["data"]["config.yaml"])


def plain_env(rendered: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The container's environment variables set in the manifest itself (not from a Secret)."""
    return {e["name"]: e["value"] for e in container(rendered)["env"] if "value" in e}


def test_every_key_the_config_reads_comes_from_the_secret(rendered):
    wanted = env_names(raw_config(rendered))
    assert "MIXPR_MASTER_KEY" in wanted  # the gateway listens on 0.0.0.0 in the pod
    from_secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container(rendered)["env"]
                   if "secretKeyRef" in e.get("valueFrom", {})}
    plain = plain_env(rendered)
    assert plain.keys() == {"MIXPR_FORM_CACHE_URL"}  # a URL with no password; every key is a secret
    assert wanted <= from_secret.keys() | plain.keys(), wanted - from_secret.keys() - plain.keys()
    assert {ref["name"] for ref in from_secret.values()} == {"mixpr-gateway-keys"}
    assert all(ref["key"] == name for name, ref in from_secret.items())
    # Required, but the deployment secret: the base runs without it (no shared form cache).
    optional = {name for name, ref in from_secret.items() if ref.get("optional")}
    assert optional == {"MIXPR_DEPLOYMENT_SECRET"}


def test_the_pod_serves_the_configmap_on_the_probed_port(rendered):
    gateway = container(rendered)
    (mount,) = [m for m in gateway["volumeMounts"] if m["name"] == "config"]
    volume = next(v for v in pod(rendered)["spec"]["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == rendered["ConfigMap"]["metadata"]["name"]  # the hashed name
    args = gateway["args"]
    assert args[args.index("--config") + 1] == f"{mount['mountPath']}/config.yaml"
    (port,) = gateway["ports"]
    assert int(args[args.index("--port") + 1]) == port["containerPort"]
    probes = [gateway[p]["httpGet"] for p in ("startupProbe", "readinessProbe", "livenessProbe")]
    assert {probe["port"] for probe in probes} == {port["name"]}
    assert rendered["Service"]["spec"]["ports"][0]["targetPort"] == port["name"]


def test_the_probes_answer_on_a_gateway_run_as_the_pod_runs_it(rendered, tmp_path):
    # The container's own command line and the ConfigMap's config; only the address is this test's.
    keys = {name: f"test-{name.lower()}" for name in env_names(raw_config(rendered))} | plain_env(rendered)
    config = tmp_path / "config.yaml"
    config.write_text(rendered["ConfigMap"]["data"]["config.yaml"])
    args = container(rendered)["args"]
    assert args[0] == "mixpr-gateway"
    port = free_port()
    argv = _replace(args[1:], {"--config": str(config), "--host": "127.0.0.1", "--port": str(port)})
    env = {k: v for k, v in os.environ.items() if k != "MIXPR_MASTER_KEY"} | keys
    log = tmp_path / "stderr.log"
    process = gateway_process(argv, env, log, cwd=tmp_path)  # from the tests' zygote (tests/zygote.py)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10, trust_env=False) as http:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                path = container(rendered)[probe]["httpGet"]["path"]
                assert _eventually_ok(http, path, process), f"{probe} {path} never answered 200"
            assert http.get("/v1/models").status_code == 401  # the master key from the Secret is on
            headers = {"Authorization": f"Bearer {keys['MIXPR_MASTER_KEY']}"}
            models = http.get("/v1/models", headers=headers).json()["data"]
            assert models and all(m["id"] != "local" for m in models)  # the embedded model is for laptops
    finally:
        process.terminate()
        process.wait(60)
    stderr = log.read_text(errors="replace") if log.exists() else ""
    assert "Traceback" not in stderr, stderr[-2000:]


def _replace(args: list[str], values: dict[str, str]) -> list[str]:
    """``args`` with the value after each flag in ``values`` replaced."""
    out = list(args)
    for flag, value in values.items():
        out[out.index(flag) + 1] = value
    return out


def _eventually_ok(http: httpx.Client, path: str, process: subprocess.Popen[bytes] | Forked) -> bool:
    deadline = time.monotonic() + 240  # imports LiteLLM, then starts the compression workers
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            status = http.get(path).status_code
            if status != 503:  # 503: still starting
                return status == 200
        time.sleep(0.2)
    return False


def test_every_selector_reaches_the_pods(rendered):
    labels = pod(rendered)["metadata"]["labels"]
    selectors = {
        "Deployment": rendered["Deployment"]["spec"]["selector"]["matchLabels"],
        "Service": rendered["Service"]["spec"]["selector"],
        "PodDisruptionBudget": rendered["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        "NetworkPolicy": rendered["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"],
    }
    for kind, selector in selectors.items():
        assert selector and selector.items() <= labels.items(), kind
    target = rendered["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", rendered["Deployment"]["metadata"]["name"])
    assert "replicas" not in rendered["Deployment"]["spec"]  # else every apply resets the HPA's count


def test_the_hpa_scales_on_cpu_the_pod_requests(rendered):
    (metric,) = rendered["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    resources = container(rendered)["resources"]
    # Utilization is a share of the request: without one the HPA reports <unknown> and never scales.
    assert resources["requests"]["cpu"] and resources["limits"]["memory"]


def test_the_pod_runs_as_the_images_user_on_a_read_only_root(rendered):
    user = re.search(r"^USER (\d+):(\d+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert user, "the Dockerfile sets a numeric USER"
    security = pod(rendered)["spec"]["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (int(user[1]), int(user[2]))
    assert security["runAsNonRoot"] and security["seccompProfile"]["type"] == "RuntimeDefault"
    gateway = container(rendered)
    assert gateway["securityContext"]["readOnlyRootFilesystem"]
    assert gateway["securityContext"]["capabilities"]["drop"] == ["ALL"]
    (tmp,) = [m for m in gateway["volumeMounts"] if m["mountPath"] == "/tmp"]  # tempfile, multiprocessing
    assert "emptyDir" in next(v for v in pod(rendered)["spec"]["volumes"] if v["name"] == tmp["name"])


def test_a_broken_base_fails_to_render(tmp_path):
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")  # the base includes ../grafana
    broken = tmp_path / "deploy" / "kubernetes"
    (broken / "config.yaml").unlink()  # the ConfigMap's source is gone
    with pytest.raises(AssertionError, match="config.yaml"):
        render(broken)


def test_the_base_ships_the_grafana_dashboard_as_is(rendered):
    """The file test_dashboard.py checks, with the label Grafana's dashboard sidecar looks for."""
    dashboard = ROOT / "deploy" / "grafana" / "mixpr-gateway.json"
    configmap = rendered["Dashboard"]
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["data"] == {dashboard.name: dashboard.read_text()}


# -- the Redis overlay (deploy/kubernetes-redis) ---------------------------------------------------


@pytest.fixture(scope="module")
def with_redis() -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL or "kubectl", "kustomize", str(ROOT / "deploy" / "kubernetes-redis")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_the_redis_overlay_points_every_replica_at_its_redis(with_redis):
    """The gateway's config, with the overlay's environment, names the Redis Service's host and port,
    and that Service reaches the Redis pod's port."""
    from gateway.config import parse_config

    gateway = _named(with_redis, "Deployment", "mixpr-gateway")
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    configmap = next(o for o in with_redis if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {}))
    raw = yaml.safe_load(configmap["data"]["config.yaml"])
    with pytest.MonkeyPatch.context() as patch:
        for name in env_names(raw):
            patch.setenv(name, env.get(name, "test-key-" + "k" * 32))
        url = parse_config(raw).general_settings.form_cache_url
    service = _named(with_redis, "Service", "mixpr-redis")
    assert url == f"redis://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/0"
    redis = _named(with_redis, "Deployment", "mixpr-redis")
    pod = redis["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = pod["spec"]["containers"][0]["ports"]
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    namespaces = {o["metadata"]["namespace"] for o in (redis, gateway, service)}
    assert namespaces == {"mixpr"}


def test_only_the_gateway_reaches_redis_which_forgets_before_it_is_killed(with_redis):
    policy = _named(with_redis, "NetworkPolicy", "mixpr-redis")
    pod = _named(with_redis, "Deployment", "mixpr-redis")["spec"]["template"]
    gateway = _named(with_redis, "Deployment", "mixpr-gateway")
    gateway_labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]
    assert source["podSelector"]["matchLabels"].items() <= gateway_labels.items()
    assert policy["spec"]["egress"] == []
    (redis,) = pod["spec"]["containers"]
    args = redis["args"]
    maxmemory = int(args[args.index("--maxmemory") + 1].removesuffix("mb"))
    limit = int(redis["resources"]["limits"]["memory"].removesuffix("Mi"))
    assert maxmemory < limit  # full, Redis evicts (allkeys-lru) rather than being OOM-killed
    assert args[args.index("--maxmemory-policy") + 1] == "allkeys-lru"
    assert args[args.index("--save") + 1] == "" and args[args.index("--appendonly") + 1] == "no"
