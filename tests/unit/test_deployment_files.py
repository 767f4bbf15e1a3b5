"""compose.yaml, the Dockerfile and the gateway's docker configs are shaped for a GPU host.

No Docker engine and no GPU here: these are static checks of what `docker compose up` would run.
"""

import json
import re
from pathlib import Path

import yaml

from gateway import config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
DOCKER = yaml.safe_load((ROOT / "config" / "docker.yaml").read_text())
LISTENER_PORTS = {lst["port"] for lst in DOCKER["listeners"].values()}


def _release(image: str) -> str:
    """'nvcr.io/nvidia/tritonserver:25.06-trtllm-python-py3' -> '25.06'."""
    return re.match(r"(\d\d\.\d\d)-", image.rpartition(":")[2]).group(1)


def _gpu(service: dict) -> bool:
    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    return any(d.get("driver") == "nvidia" and d.get("capabilities") == ["gpu"] for d in devices)


def test_default_services_and_opt_in_profiles():
    default = {name for name, svc in SERVICES.items() if "profiles" not in svc}
    assert default == {"plan-builder", "triton", "gateway"}
    assert SERVICES["triton-llm"]["profiles"] == ["llm"]
    assert SERVICES["triton-ports"]["profiles"] == ["triton-ports"]
    observability = {name for name, svc in SERVICES.items() if svc.get("profiles") == ["observability"]}
    assert observability == {"prometheus", "grafana", "otel-collector", "tempo"}


def test_traces_flow_from_the_gateway_and_triton_through_the_collector_to_tempo_and_grafana():
    collector = yaml.safe_load((ROOT / "deploy" / "otel-collector" / "config.yaml").read_text())
    pipeline = collector["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"] and set(collector["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    exporter = collector["exporters"][pipeline["exporters"][0]]
    tempo = yaml.safe_load((ROOT / "deploy" / "tempo" / "tempo.yaml").read_text())
    assert exporter["endpoint"] == "tempo:" + tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"][
        "endpoint"].rpartition(":")[2]
    source = yaml.safe_load((ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "tempo.yml").read_text())
    assert source["datasources"][0]["url"] == f"http://tempo:{tempo['server']['http_listen_port']}"
    http_in = "otel-collector:" + collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].rpartition(":")[2]
    env = SERVICES["gateway"]["environment"]
    assert env["GATEWAY__TRACING__ENDPOINT"] == f"http://{http_in}/v1/traces"
    assert env["GATEWAY__TRACING__ENABLED"] == "${GATEWAY_TRACING:-false}"  # off unless asked
    command = SERVICES["triton"]["command"]
    assert f"opentelemetry,url={http_in}/v1/traces" in command and "mode=opentelemetry" in command
    assert "level=${TRITON_TRACE_LEVEL:-OFF}" in command  # Triton traces nothing unless asked
    s = config.load(ROOT / "config" / "docker.yaml", env={"GATEWAY__TRACING__ENABLED": "true",
                                                            "GATEWAY__TRACING__ENDPOINT": env["GATEWAY__TRACING__ENDPOINT"],
                                                            "GATEWAY__TRACING__SAMPLE_RATIO": "1.0"})
    assert s.tracing.enabled and s.tracing.protocol == "http/protobuf"


def test_triton_publishes_no_port_unless_a_profile_asks():
    for name, svc in SERVICES.items():
        if "tritonserver" in svc.get("image", "") or name == "plan-builder":
            assert "ports" not in svc, f"{name} publishes a port"
    publishing = {name for name, svc in SERVICES.items() if "ports" in svc}
    assert publishing == {"gateway", "triton-ports", "prometheus", "grafana"}
    forwards = SERVICES["triton-ports"]["command"]
    assert sorted(f.split("=")[1] for f in forwards) == ["triton:8000", "triton:8001", "triton:8002"]
    assert {int(p.split(":")[0]) for p in SERVICES["triton-ports"]["ports"]} == {int(f.split("=")[0]) for f in forwards}


def test_gpu_services_reserve_a_gpu_and_tritons_gate_on_readiness():
    assert {name for name, svc in SERVICES.items() if _gpu(svc)} == {"plan-builder", "triton", "triton-llm"}
    for name in ("triton", "triton-llm"):
        svc = SERVICES[name]
        assert "v2/health/ready" in " ".join(svc["healthcheck"]["test"]) and svc["shm_size"]
        assert svc["depends_on"]["plan-builder"]["condition"] == "service_completed_successfully"
    gateway = SERVICES["gateway"]
    assert gateway["depends_on"]["triton"]["condition"] == "service_healthy"
    assert gateway["depends_on"]["triton-llm"] == {"condition": "service_healthy", "required": False}


def test_images_are_pinned_to_one_release():
    images = {name: svc["image"] for name, svc in SERVICES.items() if "nvcr.io" in svc["image"]}
    # 25.06 (Triton 2.59.0): the first release with the fixes of all three cancellation crashes of the
    # gRPC front end (server#7840, #8078, #8220; docs/deploy.md "Which Triton"); TRITON_IMAGE may name
    # another server (deploy/triton-cpu: the 2.51 the CPU tests run)
    assert images["triton"] == "${TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:25.06-py3}"
    assert images["triton-llm"] == "nvcr.io/nvidia/tritonserver:25.06-trtllm-python-py3"
    assert images["plan-builder"] == "nvcr.io/nvidia/tensorrt:25.06-py3"  # plans: same TensorRT as Triton
    assert {_release(i) for i in images.values()} == {"25.06"}
    assert all(not svc["image"].endswith(":latest") for svc in SERVICES.values())


def test_plan_builder_runs_the_repository_script_on_the_model_repository():
    pb = SERVICES["plan-builder"]
    assert pb["command"] == ["python3", "/tools/build_plans.py", "/models"]
    assert "./tools:/tools:ro" in pb["volumes"] and "./model_repository:/models" in pb["volumes"]
    assert "./model_repository:/models:ro" in SERVICES["triton"]["volumes"]


def test_the_gateway_publishes_every_listener_of_its_config():
    gateway = SERVICES["gateway"]
    published = {int(p.split(":")[-2]) for p in gateway["ports"]}
    assert published == LISTENER_PORTS
    assert all(p == f"${{GATEWAY_PUBLISH_ADDRESS:-127.0.0.1}}:{p.split(':')[-1]}:{p.split(':')[-1]}" for p in gateway["ports"])
    assert gateway["read_only"] is True and gateway["tmpfs"] == ["/tmp"]  # multiprocess metrics: a tmpfs
    assert gateway["command"] == ["--config", "${GATEWAY_CONFIG:-config/docker.yaml}"]
    s = config.load(ROOT / "config" / "docker.yaml", env={})
    assert s.upstream.grpc == "triton:8001" and s.upstream.lb_policy == "round_robin"


def test_the_llm_profile_serves_a_real_engine_from_environment_paths():
    llm = SERVICES["triton-llm"]
    mounts = {v["target"]: v for v in llm["volumes"] if isinstance(v, dict)}
    assert mounts["/llm"]["source"].startswith("${TRTLLM_MODEL_REPO:-")
    assert mounts["/engines"]["source"].startswith("${TRTLLM_ENGINE_DIR:-")
    assert all(m["bind"] == {"create_host_path": False} and m["read_only"] for m in mounts.values())
    assert "--model-repository=/models" in llm["command"] and "--model-repository=/llm" in llm["command"]


def test_the_llm_gateway_config_differs_from_docker_yaml_only_in_upstream_and_mindie_routes():
    llm = yaml.safe_load((ROOT / "config" / "docker-llm.yaml").read_text())
    assert llm["upstream"].pop("grpc") == "triton-llm:8001"
    plain = dict(DOCKER, upstream={k: v for k, v in DOCKER["upstream"].items() if k != "grpc"})
    assert {k: v for k, v in llm.pop("dialects").items() if k != "mindie"} == plain.pop("dialects", {})
    assert llm == plain
    s = config.load(ROOT / "config" / "docker-llm.yaml", env={})
    mindie = s.dialect("mindie")
    assert mindie.aliases == {"llama2_7b": "ensemble"}  # in place of tiny_llm
    assert mindie.models["ensemble"].profile == "trtllm"


def test_every_model_has_a_cpu_configuration_and_tensorrt_models_ship_their_onnx():
    repo = ROOT / "model_repository"
    for model in sorted(p for p in repo.iterdir() if p.is_dir()):
        default = (model / "config.pbtxt").read_text()
        cpu = model / "configs" / "cpu.pbtxt"
        if "tensorrt_plan" in default:
            assert cpu.exists(), f"{model.name}: GPU-only config without configs/cpu.pbtxt"
            versions = [v for v in model.iterdir() if v.name.isdigit()]
            assert all((v / "model.onnx").exists() for v in versions), f"{model.name}: no ONNX to build the plan"
        text = cpu.read_text() if cpu.exists() else default
        assert "KIND_GPU" not in text, f"{model.name}: CPU configuration asks for a GPU"


# -- Dockerfile -----------------------------------------------------------------------------------

DOCKERFILE = (ROOT / "Dockerfile").read_text()
INSTRUCTIONS = [line for line in re.sub(r"\\\n", " ", DOCKERFILE).splitlines() if line and not line.startswith("#")]


def _args() -> dict[str, str]:
    return dict(re.match(r"ARG (\w+)=(\S+)", i).groups() for i in INSTRUCTIONS if i.startswith("ARG ") and "=" in i)


def test_the_image_is_multi_stage_and_only_the_venv_crosses_over():
    stages = [i.split() for i in INSTRUCTIONS if i.startswith("FROM ")]
    assert [s[-1] for s in stages] == ["build", "runtime"] and all(s[-2] == "AS" for s in stages)
    runtime = INSTRUCTIONS[INSTRUCTIONS.index(next(i for i in INSTRUCTIONS if i.endswith("AS runtime"))):]
    assert [i for i in runtime if "--from=" in i] == ["COPY --from=build /opt/venv /opt/venv"]
    assert not any(i.startswith("RUN") and "pip install" in i for i in runtime)


def test_base_images_are_pinned_to_a_full_version_or_a_digest():
    args = _args()
    for line in (i for i in INSTRUCTIONS if i.startswith("FROM ")):
        image = line.split()[1]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert "@sha256:" in image or re.fullmatch(r"\d+\.\d+\.\d+(-[\w.-]+)?", tag), f"unpinned base {image}"


def test_the_runtime_runs_as_a_numeric_non_root_user():
    users = [i.split()[1] for i in INSTRUCTIONS if i.startswith("USER ")]
    assert len(users) == 1 and INSTRUCTIONS.index(f"USER {users[0]}") > INSTRUCTIONS.index(
        next(i for i in INSTRUCTIONS if i.endswith("AS runtime")))
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or int(gid) > 0)


def test_the_image_exposes_and_probes_the_docker_config_listeners():
    exposed = {int(p) for i in INSTRUCTIONS if i.startswith("EXPOSE ") for p in i.split()[1:]}
    assert exposed == LISTENER_PORTS
    health = next(i for i in INSTRUCTIONS if i.startswith("HEALTHCHECK"))
    assert f"127.0.0.1:{DOCKER['listeners']['admin_http']['port']}/health" in health
    assert 'CMD ["--config", "config/docker.yaml"]' in INSTRUCTIONS


def test_copied_sources_exist_and_are_not_docker_ignored():
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()]
    for inst in INSTRUCTIONS:
        if inst.startswith("COPY ") and "--from=" not in inst:
            for src in inst.split()[1:-1]:
                assert (ROOT / src).exists(), src
                assert not any(src == pat or src.startswith(pat + "/") for pat in ignored), f"{src} is .dockerignored"


def test_services_running_the_gateway_image_build_it():
    """An image only built here must never be pulled: every service that runs it builds it."""
    for name, svc in SERVICES.items():
        if svc["image"].startswith("triton-protocol-gateway:"):
            assert svc.get("build") == ".", name


# -- the observability profile: Prometheus and Grafana provisioned with the gateway's dashboard ----

DEPLOY = ROOT / "deploy"


def _mounts(service: str) -> dict[str, Path]:
    """container path -> repository path of a service's read-only bind mounts."""
    out = {}
    for volume in SERVICES[service]["volumes"]:
        source, target, mode = volume.split(":")
        assert mode == "ro" and source.startswith("./"), volume
        assert (ROOT / source).exists(), source
        out[target] = (ROOT / source).resolve()
    return out


def test_observability_images_are_pinned_and_their_uis_stay_on_loopback():
    for name in ("prometheus", "grafana", "otel-collector", "tempo"):
        svc = SERVICES[name]
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", svc["image"]), svc["image"]
        assert all(p.startswith("127.0.0.1:") for p in svc.get("ports", ())), name
    assert "ports" not in SERVICES["otel-collector"] and "ports" not in SERVICES["tempo"]  # compose network only
    assert SERVICES["prometheus"]["depends_on"] == ["gateway"]
    assert SERVICES["grafana"]["depends_on"] == ["prometheus", "tempo"]


def test_prometheus_scrapes_the_gateways_admin_listener():
    mounts = _mounts("prometheus")
    config_path = mounts["/etc/prometheus/prometheus.yml"]
    assert config_path == DEPLOY / "prometheus" / "prometheus.yml"
    assert "--config.file=/etc/prometheus/prometheus.yml" in SERVICES["prometheus"]["command"]
    config = yaml.safe_load(config_path.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    admin = DOCKER["listeners"]["admin_http"]["port"]
    assert jobs["gateway"]["metrics_path"] == "/metrics"
    assert jobs["gateway"]["static_configs"] == [{"targets": [f"gateway:{admin}"]}]
    assert jobs["triton"]["static_configs"] == [{"targets": ["triton:8002"]}]  # Triton's own metrics port


def test_grafana_is_provisioned_with_the_datasource_and_the_dashboard():
    mounts = _mounts("grafana")
    provisioning = mounts["/etc/grafana/provisioning"]
    assert provisioning == DEPLOY / "grafana" / "provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert [(d["type"], d["url"]) for d in datasources] == [("prometheus", "http://prometheus:9090")]
    providers = yaml.safe_load((provisioning / "dashboards" / "gateway.yml").read_text())["providers"]
    folder = providers[0]["options"]["path"]
    dashboards = {target: path for target, path in mounts.items() if target.startswith(folder + "/")}
    assert list(dashboards.values()) == [DEPLOY / "grafana" / "gateway-dashboard.json"]
    assert SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] in dashboards
    dashboard = json.loads((DEPLOY / "grafana" / "gateway-dashboard.json").read_text())
    uid = datasources[0]["uid"]
    sources = [p["datasource"] for p in dashboard["panels"] if "datasource" in p]
    sources += [t["datasource"] for p in dashboard["panels"] for t in p.get("targets", [])]
    sources += [v["datasource"] for v in dashboard["templating"]["list"]]
    assert sources and all(s == {"type": "prometheus", "uid": uid} for s in sources)


# -- compose.cpu.yaml: `docker compose up` without a GPU ------------------------------------------

class _Reset:
    """Compose's ``!reset``: the key is removed from the merged service."""


class _ComposeLoader(yaml.SafeLoader):
    pass


class _Override(dict):
    """Compose's ``!override``: the mapping replaces the base's instead of merging with it."""


_ComposeLoader.add_constructor("!reset", lambda _loader, _node: _Reset())
_ComposeLoader.add_constructor("!override", lambda loader, node: _Override(loader.construct_mapping(node)))


def _merge(base, override):
    """Compose's merge for what compose.cpu.yaml uses: mappings merge, ``!reset`` removes, the rest replaces."""
    if not (isinstance(base, dict) and isinstance(override, dict)):
        return override
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, _Reset):
            out.pop(key, None)
        elif isinstance(value, _Override):
            out[key] = dict(value)
        else:
            out[key] = _merge(base.get(key), value)
    return out


CPU = _merge(COMPOSE, yaml.load((ROOT / "compose.cpu.yaml").read_text(), Loader=_ComposeLoader))["services"]


def test_the_cpu_override_starts_triton_and_the_gateway_and_reserves_no_gpu():
    default = {name for name, svc in CPU.items() if "profiles" not in svc}
    assert default == {"triton", "gateway"}  # no plan-builder: no plans on CPU
    gpu_only = {"llm", "gpu-plans"}  # TensorRT-LLM and the plan builder: GPU only, never enabled here
    assert not any(_gpu(svc) for svc in CPU.values() if not gpu_only & set(svc.get("profiles", ())))
    assert CPU["plan-builder"]["profiles"] == ["gpu-plans"]
    assert "depends_on" not in CPU["triton"]
    assert CPU["gateway"]["depends_on"]["triton"]["condition"] == "service_healthy"
    assert "v2/health/ready" in " ".join(CPU["triton"]["healthcheck"]["test"])


def test_the_cpu_triton_is_the_same_release_with_the_models_cpu_configurations():
    assert CPU["triton"]["image"] == SERVICES["triton"]["image"]  # TRITON_IMAGE: the CPU stand-in (2.51)
    command = CPU["triton"]["command"]
    assert "--model-config-name=cpu" in command  # configs/cpu.pbtxt where a model has one
    assert [a for a in command if a != "--model-config-name=cpu"] == SERVICES["triton"]["command"]
    assert CPU["triton"]["volumes"] == SERVICES["triton"]["volumes"]
    assert CPU["gateway"] == SERVICES["gateway"]  # the same gateway, config and ports


def test_the_cpu_triton_asks_for_no_locked_memory():
    """memlock -1 is refused where the hard limit is lower (`error setting rlimit type 8`); CPU pins nothing."""
    assert SERVICES["triton"]["ulimits"]["memlock"] == -1
    assert CPU["triton"]["ulimits"] == {"stack": SERVICES["triton"]["ulimits"]["stack"]}


def test_the_readme_gives_the_cpu_command_beside_the_gpu_one():
    readme = (ROOT / "README.md").read_text()
    gpu, cpu = "docker compose up", "docker compose -f compose.yaml -f compose.cpu.yaml up"
    assert cpu in readme and cpu in (ROOT / "compose.cpu.yaml").read_text()
    assert abs(readme.index(cpu) - readme.index(gpu)) < 600


def test_the_kubernetes_gateway_loads_its_config_with_its_environment(monkeypatch):
    """deploy/k8s/gateway.yaml: config/docker.yaml with the container's environment; `workers: auto`
    counts the CPU limit's quota (gateway/process/cpus.py), here 2 CPUs."""
    from gateway.process import cpus

    docs = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "gateway.yaml").read_text()))
    pod = next(d for d in docs if d and d.get("kind") == "Deployment")["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "gateway")
    assert container["args"] == ["--config", "config/docker.yaml"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GATEWAY__WORKERS"] == "auto"
    monkeypatch.setattr(cpus, "usable", lambda: int(container["resources"]["limits"]["cpu"]))
    s = config.load(ROOT / "config" / "docker.yaml", env=env)
    assert (s.workers, s.workers_auto) == (2, True)
    assert s.upstream.grpc == "dns:///triton-headless:8001"


def test_the_image_installs_tritonclient_grpc_alone_which_is_all_the_gateway_imports():
    """The runtime venv (Dockerfile: `pip install .`) gets tritonclient[grpc], not [all] (cuda-python,
    perf-analyzer, the HTTP client): so the gateway may import tritonclient.grpc's protobuf modules only."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d for d in project["dependencies"] if d.startswith("tritonclient")] == ["tritonclient[grpc]==2.73.0"]
    assert "tritonclient[all]==2.73.0" in project["optional-dependencies"]["dev"]  # the tests' real clients
    imports = set()
    for path in (ROOT / "gateway").rglob("*.py"):
        for line in path.read_text().splitlines():
            if m := re.match(r"\s*(?:from (tritonclient\S*) import (.+)|import (tritonclient\S*))", line):
                imports.add((m.group(1) or m.group(3), m.group(2) or ""))
    assert imports and all(module == "tritonclient.grpc" for module, _ in imports), imports
    names = {n.strip() for _, names in imports for n in names.split(",")}
    assert names <= {"service_pb2", "service_pb2_grpc", "model_config_pb2"}, names
