"""deploy/k8s: every manifest is schema-valid Kubernetes (kubernetes-validate, strict) and the
pieces fit together: selectors, named ports, probes, GPUs, volumes, images, the gateway's config.

No cluster here (nor kustomize): `kubectl apply -k deploy/k8s` itself was not run.
"""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gateway import config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.31"
KUSTOMIZATION = yaml.safe_load((K8S / "kustomization.yaml").read_text())
DOCS = [(f, doc) for f in KUSTOMIZATION["resources"] for doc in yaml.safe_load_all((K8S / f).read_text()) if doc]
DOCKER = yaml.safe_load((ROOT / "config" / "docker.yaml").read_text())


def _get(kind: str, name: str) -> dict:
    (doc,) = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _pod(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def _container(workload: dict, name: str) -> dict:
    (c,) = [c for c in _pod(workload)["containers"] + _pod(workload).get("initContainers", []) if c["name"] == name]
    return c


def test_the_kustomization_lists_every_manifest_file():
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(KUSTOMIZATION["resources"]) == files


@pytest.mark.parametrize(("path", "doc"), DOCS, ids=[f"{d['kind']}/{d['metadata']['name']}" for _, d in DOCS])
def test_every_resource_is_valid_kubernetes(path, doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_a_broken_manifest():
    """The check above has teeth: an unknown field or a wrong type fails."""
    bad = yaml.safe_load((K8S / "gateway.yaml").read_text())
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["prot"] = 8001
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)
    bad = yaml.safe_load((K8S / "gateway-hpa.yaml").read_text())
    bad["spec"]["minReplicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_workload_selectors_match_their_pod_labels_and_services_select_pods_with_their_ports():
    workloads = [d for _, d in DOCS if d["kind"] == "Deployment"]
    for w in workloads:
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert w["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for svc in (d for _, d in DOCS if d["kind"] == "Service"):
        selected = [w for w in workloads if svc["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1, svc["metadata"]["name"]
        named = {p["name"]: p["containerPort"] for c in _pod(selected[0])["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in named and named[port["targetPort"]] == port["port"]


def test_volume_mounts_name_declared_volumes_and_claims_exist():
    claims = {d["metadata"]["name"] for _, d in DOCS if d["kind"] == "PersistentVolumeClaim"}
    for _, w in DOCS:
        if w["kind"] not in ("Deployment", "Job"):
            continue
        volumes = {v["name"]: v for v in _pod(w).get("volumes", [])}
        for c in _pod(w)["containers"] + _pod(w).get("initContainers", []):
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (w["metadata"]["name"], c["name"], m["name"])
        for v in volumes.values():
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims


def test_triton_replicas_have_a_gpu_readiness_on_v2_health_ready_and_a_headless_service():
    triton = _get("Deployment", "triton")
    assert triton["spec"]["replicas"] >= 2
    c = _container(triton, "triton")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    for probe in ("readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 300
    assert {"name": "model-repository", "mountPath": "/models", "readOnly": True} in c["volumeMounts"]
    wait = _container(triton, "wait-for-plans")
    assert wait["command"] == ["python3", "/tools/build_plans.py", "/models", "--wait"]
    headless = _get("Service", "triton-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert {"name": "grpc", "port": 8001, "targetPort": "grpc"} in headless["spec"]["ports"]


def test_the_gateway_balances_over_every_triton_replica_via_dns():
    gw = _container(_get("Deployment", "gateway"), "gateway")
    env = {e["name"]: e["value"] for e in gw["env"]}
    headless = _get("Service", "triton-headless")
    grpc_port = next(p["port"] for p in headless["spec"]["ports"] if p["name"] == "grpc")
    assert env["GATEWAY__UPSTREAM__GRPC"] == f"dns:///{headless['metadata']['name']}:{grpc_port}"
    assert gw["args"] == ["--config", "config/docker.yaml"]  # the image's config: one place for compose and k8s
    s = config.load(ROOT / "config" / "docker.yaml", env=env)
    assert s.upstream.grpc.startswith("dns:///") and s.upstream.lb_policy == "round_robin"
    assert s.workers == int(gw["resources"]["limits"]["cpu"])


def test_the_gateway_probes_grpc_health_and_admin_live_and_exposes_a_service_per_dialect():
    gateway = _get("Deployment", "gateway")
    gw = _container(gateway, "gateway")
    ports = {p["name"]: p["containerPort"] for p in gw["ports"]}
    assert set(ports.values()) == {lst["port"] for lst in DOCKER["listeners"].values()}
    admin = DOCKER["listeners"]["admin_http"]["port"]
    # readiness: the gRPC health service of the V2 listener (gateway/ops/grpchealth.py), the whole server
    assert gw["readinessProbe"]["grpc"] == {"port": DOCKER["listeners"]["v2_grpc"]["port"]}
    assert gw["readinessProbe"]["grpc"]["port"] in ports.values()
    assert ports[gw["livenessProbe"]["httpGet"]["port"]] == admin and gw["livenessProbe"]["httpGet"]["path"] == "/live"
    services = [d for _, d in DOCS if d["kind"] == "Service" and d["metadata"]["name"].startswith("gateway-")]
    served = sorted(p["port"] for s in services for p in s["spec"]["ports"])
    assert served == sorted(ports.values()) and all(len(s["spec"]["ports"]) == 1 for s in services)
    sec = _pod(gateway)["securityContext"]
    assert sec["runAsNonRoot"] and sec["runAsUser"] == 10001  # the Dockerfile's USER
    assert "USER 10001:10001" in (ROOT / "Dockerfile").read_text()


def test_the_hpa_scales_the_gateway_on_cpu_which_it_requests():
    hpa = _get("HorizontalPodAutoscaler", "gateway")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "gateway")
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert _container(_get("Deployment", "gateway"), "gateway")["resources"]["requests"]["cpu"]


def test_the_plan_job_builds_on_a_gpu_from_the_image_repository():
    job = _get("Job", "plan-builder")
    build = _container(job, "build-plans")
    assert build["command"] == ["python3", "/tools/build_plans.py", "/models"]
    assert build["resources"]["limits"]["nvidia.com/gpu"] == 1
    copy = _container(job, "copy-model-repository")
    assert "/app/model_repository/." in copy["command"][-1] and "/app/tools/build_plans.py" in copy["command"][-1]
    assert _get("PersistentVolumeClaim", "model-repository")["spec"]["accessModes"] == ["ReadWriteMany"]


def test_images_are_named_in_the_kustomization_with_the_compose_release():
    pinned = {i["name"]: i["newTag"] for i in KUSTOMIZATION["images"]}
    used = {c["image"] for _, d in DOCS if d["kind"] in ("Deployment", "Job")
            for c in _pod(d)["containers"] + _pod(d).get("initContainers", [])}
    assert used == set(pinned)  # untagged in the manifests: one place to pin (kustomize edit set image)
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    # compose names NGC's Triton as the default of TRITON_IMAGE (a CPU stand-in can be set instead: docs/deploy.md)
    assert f"${{TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:{pinned['nvcr.io/nvidia/tritonserver']}}}" == compose["triton"]["image"]
    assert f"nvcr.io/nvidia/tensorrt:{pinned['nvcr.io/nvidia/tensorrt']}" == compose["plan-builder"]["image"]
    assert f"triton-protocol-gateway:{pinned['triton-protocol-gateway']}" == compose["gateway"]["image"]


def test_disruption_budgets_select_existing_workloads_and_triton_rolls_without_a_spare_gpu():
    deployments = {d["metadata"]["name"]: d for _, d in DOCS if d["kind"] == "Deployment"}
    for pdb in (d for _, d in DOCS if d["kind"] == "PodDisruptionBudget"):
        target = deployments[pdb["metadata"]["name"]]
        assert pdb["spec"]["selector"]["matchLabels"] == target["spec"]["selector"]["matchLabels"]
        assert pdb["spec"]["minAvailable"] < target["spec"]["replicas"]  # a drain can still proceed
    rolling = deployments["triton"]["spec"]["strategy"]["rollingUpdate"]
    assert rolling == {"maxSurge": 0, "maxUnavailable": 1}
