"""The settings schema: strict types, unknown keys refused at every level, errors naming file, line
and field, one environment rule, and every dialect section checked at load time."""

import pytest

from gateway import config
from gateway.dialects import CATALOGUE
from gateway.settings import SettingsError


def _load(tmp_path, text, env=None):
    f = tmp_path / "gateway.yaml"
    f.write_text(text)
    return config.load(f, env=env or {}), f


def _error(tmp_path, text, env=None) -> str:
    with pytest.raises(SettingsError) as err:
        _load(tmp_path, text, env)
    return str(err.value)


def test_defaults_give_every_listener_its_documented_port():
    s = config.load(None, env={})
    assert {n: lst.port for n, lst in s.listeners.items()} == {
        "v2_grpc": 8001, "v2_http": 8000, "tfserving_grpc": 8500, "tfserving_rest": 8501, "grps_http": 7080,
        "grps_grpc": 7081, "mindie_http": 1025, "admin_http": 9090,
    }
    assert all(lst.enabled for lst in s.listeners.values())


def test_listeners_come_from_the_catalogue_only():
    declared = [spec.name for d in CATALOGUE for spec in d.listeners]
    assert len(declared) == len(set(declared))
    assert sorted(config.load(None, env={}).listeners) == sorted(declared)
    assert {lst.dialect for lst in config.load(None, env={}).listeners.values()} == {d.name for d in CATALOGUE}


def test_yaml_then_environment(tmp_path):
    s, _ = _load(tmp_path,
                 "upstream: {grpc: 'triton:8001', timeout_s: 5}\n"
                 "listeners: {grps_http: {port: 17080, enabled: false}}\n"
                 "dialects: {grps: {default_model: echo}}\n",
                 env={"GATEWAY__UPSTREAM__GRPC": "10.0.0.1:9001",
                      "GATEWAY__LISTENERS__ADMIN_HTTP__PORT": "19090",
                      "gateway__dialects__grps__pretty_json": "false"})
    assert s.upstream.grpc == "10.0.0.1:9001" and s.upstream.timeout_s == 5.0
    assert s.listener("grps_http").port == 17080 and not s.listener("grps_http").enabled
    assert s.listener("admin_http").port == 19090
    assert s.dialect("grps").default_model == "echo" and s.dialect("grps").pretty_json is False
    assert s.dialect("tfserving").expose_all_models is True  # an absent section has its defaults


def test_timeouts_per_listener(tmp_path):
    s, _ = _load(tmp_path, "upstream: {timeout_s: 7}\nlisteners: {grps_http: {timeout_s: 2.5}}\n"
                           "limits: {stream_timeout_s: 99}\n")
    assert s.listener("grps_http").timeout_s == 2.5
    assert s.listener("grps_grpc").timeout_s == 7.0  # upstream.timeout_s when the dialect declares none
    assert s.listener("tfserving_rest").timeout_s == 30.0  # TF Serving's own REST default
    assert s.listener("grps_http").stream_timeout_s == 99.0


def test_the_top_level_host_is_every_listeners_default(tmp_path):
    s, _ = _load(tmp_path, "host: 127.0.0.1\nlisteners: {admin_http: {host: 0.0.0.0}}\n")
    assert s.listener("grps_http").host == "127.0.0.1" and s.listener("admin_http").host == "0.0.0.0"


@pytest.mark.parametrize(
    "text,line,field,message",
    [
        ("listeners:\n  nope: {port: 1}\n", 2, "listeners.nope", "Extra inputs are not permitted"),
        ("upstream:\n  grpc: 'x:1'\n  bogus: 1\n", 3, "upstream.bogus", "Extra inputs"),
        ("listeners:\n  grps_http:\n    port: 8501.9\n", 3, "listeners.grps_http.port", "valid integer"),
        ("listeners:\n  grps_http:\n    port: 70000\n", 3, "listeners.grps_http.port", "less than or equal"),
        ("workers: 0\n", 1, "workers", "a whole number of at least 1, or auto (got 0)"),
        ("workers: all\n", 1, "workers", "a whole number of at least 1, or auto (got 'all')"),
        ("workers: '2'\n", 1, "workers", "a whole number of at least 1, or auto (got '2')"),
        ("colour: blue\n", 1, "colour", "Extra inputs"),
        ("dialects:\n  tfservin: {}\n", 2, "dialects.tfservin", "Extra inputs"),
        ("dialects:\n  tfserving:\n    expose_all_models: 'false'\n", 3,
         "dialects.tfserving.expose_all_models", "valid boolean"),
        ("dialects:\n  tfserving:\n    models:\n      m:\n        signatures:\n          c:\n"
         "            method: classify\n            scores: y\n            labels: abc\n", 9,
         "dialects.tfserving.models.m.signatures.c.labels", "valid tuple"),
        ("dialects:\n  grps:\n    streaming: {ctrl_mode: smoke}\n", 3, "dialects.grps.streaming.ctrl_mode",
         "'query_param', 'header_param' or 'body_param'"),
        ("dialects:\n  mindie:\n    models:\n      tiny_llm: {profile: nope}\n", 4,
         "dialects.mindie.models.tiny_llm.profile", "unknown model profile"),
        ("dialects:\n  mindie:\n    request_timeout_s: 60\n", 3, "dialects.mindie.request_timeout_s", "Extra"),
        ("log_level: LOUD\n", 1, "log_level", "'DEBUG'"),
    ],
)
def test_bad_settings_name_the_file_the_line_and_the_field(tmp_path, text, line, field, message):
    text_of_error = _error(tmp_path, text)
    path = str(tmp_path / "gateway.yaml")
    assert text_of_error.startswith(f"{path}:{line}: {field}: "), text_of_error
    assert message in text_of_error
    assert "Traceback" not in text_of_error and "\n" not in text_of_error


def test_every_problem_is_reported_at_once(tmp_path):
    lines = _error(tmp_path, "workers: 0\nlisteners: {grps_http: {port: x}}\n").splitlines()
    assert len(lines) == 2
    assert ":2: listeners.grps_http.port: " in lines[0] and ":1: workers: " in lines[1]


def test_a_yaml_syntax_error_is_one_line(tmp_path):
    text = _error(tmp_path, "upstream:\n  grpc: 'a:1'\n listeners: [\n")
    assert text.startswith(str(tmp_path / "gateway.yaml") + ":3:")
    assert "YAML syntax error" in text and "\n" not in text


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(SettingsError, match="cannot read"):
        config.load(tmp_path / "absent.yaml", env={})


def test_environment_values_are_checked_and_named(tmp_path):
    text = _error(tmp_path, "", env={"GATEWAY__LISTENERS__GRPS_HTTP__PORT": "abc"})
    assert text.startswith("GATEWAY__LISTENERS__GRPS_HTTP__PORT: listeners.grps_http.port:")
    text = _error(tmp_path, "", env={"GATEWAY__LISTENERS__GRPS_HTTPS__PORT": "1"})
    assert "GATEWAY__LISTENERS__GRPS_HTTPS__PORT: listeners.grps_https" in text
    assert config.load(None, env={"GATEWAY__WORKERS": "3"}).workers == 3
    assert config.load(None, env={"OTHER__WORKERS": "3", "GATEWAY_WORKERS": "3"}).workers == 1


def test_two_listeners_cannot_share_a_port(tmp_path):
    assert "also the port of" in _error(tmp_path, "listeners: {grps_http: {port: 8501}}\n")
    s, _ = _load(tmp_path, "listeners: {grps_http: {port: 8501}, tfserving_rest: {enabled: false}}\n")
    assert s.listener("grps_http").port == 8501


def test_settings_are_immutable():
    s = config.load(None, env={})
    with pytest.raises(AttributeError):
        s.workers = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.listeners["v2_grpc"] = None  # type: ignore[index]
    with pytest.raises(Exception, match="frozen"):
        s.upstream.grpc = "x:1"  # type: ignore[misc]


def test_an_upstream_that_is_our_own_listener_is_refused(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("upstream: {grpc: '127.0.0.1:8001'}\n")
    with pytest.raises(SettingsError, match="own v2_grpc listener"):
        config.load(f, env={})
    assert config.load(f, env={"GATEWAY__LISTENERS__V2_GRPC__PORT": "9001"}).upstream.grpc == "127.0.0.1:8001"
    assert config.load(f, env={"GATEWAY__UPSTREAM__GRPC": "triton:8001"}).upstream.grpc == "triton:8001"


def test_upstream_must_be_host_and_port():
    with pytest.raises(SettingsError, match="not host:port"):
        config.load(None, env={"GATEWAY__UPSTREAM__GRPC": "triton"})


def test_the_reference_file_is_complete_and_valid():
    """gateway.yaml at the root is what `make run` uses: it loads, and it names every field."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    s = config.load(root / "gateway.yaml", env={})
    assert s.listener("tfserving_rest").port == 8501
    text = (root / "gateway.yaml").read_text()
    schema = config.schema()
    for section in ("upstream", "limits", "local_triton", "tracing"):
        for name in schema.model_fields[section].annotation.model_fields:
            assert f"{name}:" in text, f"gateway.yaml does not document {section}.{name}"
    for d in CATALOGUE:
        for spec in d.listeners:
            assert f"{spec.name}:" in text, f"gateway.yaml does not list {spec.name}"


@pytest.mark.parametrize("text, env", [
    ("upstream:\n  grpc: triton:8001\n  stream_mux: {enabled: false}\n", {}),
    ("upstream: {grpc: 'triton:8001'}\n", {"GATEWAY__UPSTREAM__STREAM_MUX__ENABLED": "true"}),
])
def test_the_removed_stream_mux_is_refused_with_why_and_what_to_do(tmp_path, text, env):
    """An old file (or environment) that still sets upstream.stream_mux gets its own error, not "extra inputs"."""
    msg = _error(tmp_path, text, env)
    assert "stream_mux was removed" in msg and "delete upstream.stream_mux" in msg
    assert ("GATEWAY__UPSTREAM__STREAM_MUX__ENABLED" in msg) if env else ("gateway.yaml:1: upstream:" in msg)
