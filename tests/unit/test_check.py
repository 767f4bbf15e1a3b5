"""`gateway check` (gateway/check.py and each dialect's check.py) over the scripted FakeUpstream:
every kind of finding, the exit status, the table and the --json schema. The CLI itself runs
against a port where no Triton listens (the real upstream client)."""

from __future__ import annotations

import json

import pytest
import yaml

from gateway import check, cli, config, settings
from gateway.core.errors import ErrorKind, GatewayError, not_found
from gateway.core.tensors import ModelIndexEntry, ModelMetadata, TensorSpec
from gateway.ops import findings
from tests.fakes import FakeUpstream, trtllm_meta, vllm_meta
from tests.support import free_port

F32 = (-1,)
HP3 = ModelMetadata("saved_model_half_plus_three", ("123",), "python",
                    (TensorSpec("x", "FP32", F32),), (TensorSpec("y", "FP32", F32),))
ECHO = ModelMetadata("grps_echo", ("1",), "python", (TensorSpec("text", "BYTES", (1,)),),
                     (TensorSpec("text_out", "BYTES", (1,)),))
HALF = ModelMetadata("half_model", ("1",), "python", (TensorSpec("x_half", "FP16", F32),),
                     (TensorSpec("y_half", "FP16", F32),))
TEXT_NOT_DECOUPLED = ModelMetadata("text_unary", ("1",), "python", (TensorSpec("text_input", "BYTES", (1,)),),
                                   (TensorSpec("text_output", "BYTES", (1,)),))
TINY = trtllm_meta("tiny_llm")
WHOLE = " (every request to 'half' fails meanwhile: its signatures are resolved together)"


class Upstream(FakeUpstream):
    """FakeUpstream whose metadata honours versions (a version Triton does not serve is NOT_FOUND)."""

    async def model_metadata(self, model, version=""):
        meta = await super().model_metadata(model, version)
        if version and version not in meta.versions:
            raise not_found(f"Request for unknown model: '{model}' version {version} is not found")
        return meta

    async def repository_index(self):
        if self.index is not None:
            return list(self.index)
        return [ModelIndexEntry(m.name, v, "READY") for m in self.metas.values() for v in m.versions]


def load(tmp_path, dialects: dict | None = None, **top) -> settings.Settings:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"upstream": {"grpc": "127.0.0.1:1"}, "dialects": dialects or {}, **top}))
    return config.load(path, env={})


async def report(tmp_path, dialects=None, metas=(HP3, ECHO, TINY), index=None, **top) -> check.Report:
    return await check.collect(load(tmp_path, dialects, **top), Upstream(metas=list(metas), index=index))


def errors(r: check.Report, dialect: str | None = None) -> list[str]:
    return [f"{f.name}: {f.message}" for f in r.findings if f.level == "error" and dialect in (None, f.dialect)]


def warnings(r: check.Report, dialect: str | None = None) -> list[str]:
    return [f"{f.name}: {f.message}" for f in r.findings if f.level == "warning" and dialect in (None, f.dialect)]


def rows(r: check.Report, dialect: str) -> dict[str, list[findings.Row]]:
    out: dict[str, list[findings.Row]] = {}
    for row in r.rows:
        if row.dialect == dialect:
            out.setdefault(row.name, []).append(row)
    return out


# -- a clean configuration ---------------------------------------------------------------------
async def test_every_dialect_lists_its_names_and_exits_0(tmp_path):
    r = await report(tmp_path)
    assert (r.reachable, r.ready, r.errors, r.exit_code) == (True, True, 0, 0), r.findings
    tf = rows(r, "tfserving")
    assert {row.detail for row in tf["saved_model_half_plus_three"]} == {
        "serving_default [predict]", "tensorflow/serving/regress [regress]", "tensorflow/serving/classify [classify]"}
    sd = tf["saved_model_half_plus_three"][0]
    assert (sd.model, sd.version, [str(i) for i in sd.inputs]) == ("saved_model_half_plus_three", "123", ["x FP32[-1]"])
    grps = rows(r, "grps")
    assert set(grps) == {"grps_echo-1", "saved_model_half_plus_three-123", "tiny_llm-1"}
    assert "payloads: str_data/bin_data, gtensors, gmap (default_model)" == grps["grps_echo-1"][0].detail
    assert "ndarray" in grps["saved_model_half_plus_three-123"][0].detail
    mindie = rows(r, "mindie")
    assert set(mindie) == {"tiny_llm", "llama2_7b"}
    assert mindie["llama2_7b"][0].model == "tiny_llm"
    assert mindie["llama2_7b"][0].detail == "alias of tiny_llm; profile trtllm, tokenizer words"
    assert set(rows(r, "v2")) == {"saved_model_half_plus_three", "grps_echo", "tiny_llm"}


async def test_configured_names_show_their_aliases_labels_and_versions(tmp_path):
    r = await report(tmp_path, {
        "tfserving": {"expose_all_models": False, "models": {"half": {
            "triton": "saved_model_half_plus_three", "version_labels": {"stable": 123},
            "signatures": {"serving_default": {"inputs": {"input": "x"}, "outputs": {"output": "y"}}}}}},
        "grps": {"models": {"mine-1.0.0": {"triton_model": "saved_model_half_plus_three", "triton_version": 123,
                                           "ndarray_input": "x", "ndarray_output": "y"}}},
    })
    assert r.errors == 0, r.findings
    (sd,) = [row for row in rows(r, "tfserving")["half"] if row.detail.startswith("serving_default")]
    assert [str(i) for i in sd.inputs] == ["input=x FP32[-1]"] and [str(o) for o in sd.outputs] == ["output=y FP32[-1]"]
    assert sd.detail == "serving_default [predict] labels: stable=123"
    assert "saved_model_half_plus_three" not in rows(r, "tfserving")  # expose_all_models: false
    (mine,) = rows(r, "grps")["mine-1.0.0"]
    assert (mine.model, mine.version) == ("saved_model_half_plus_three", "123")
    assert mine.detail.startswith("payloads: ndarray, gtensors, gmap (configured)")


# -- TF Serving findings ------------------------------------------------------------------------
async def test_tf_missing_model(tmp_path):
    r = await report(tmp_path, {"tfserving": {"models": {"half": {"triton": "no_such_model"}}}})
    assert errors(r) == ["half: Triton has no model 'no_such_model'"]
    assert r.exit_code == 1


async def test_tf_model_without_a_ready_version(tmp_path):
    index = [ModelIndexEntry("saved_model_half_plus_three", "123", "UNAVAILABLE", "load failed")]
    r = await report(tmp_path, {"tfserving": {"models": {"half": {"triton": "saved_model_half_plus_three"}}}},
                     metas=[HP3], index=index)
    assert "half: Triton model 'saved_model_half_plus_three' has no ready version (123 UNAVAILABLE)" in errors(r)


async def test_tf_wrong_input_and_output_names_are_each_named(tmp_path):
    r = await report(tmp_path, {"tfserving": {"models": {"half": {
        "triton": "saved_model_half_plus_three",
        "signatures": {"serving_default": {"inputs": {"input": "wrong_in"}},
                       "regress_y": {"method": "regress", "features": {"x": "x"}, "output": "wrong_out"},
                       "good": {"inputs": {"a": "x"}}}}}}})
    assert sorted(errors(r, "tfserving")) == [
        "half: signature 'regress_y': signature maps 'outputs' to output 'wrong_out', which Triton model "
        f"'saved_model_half_plus_three' does not have{WHOLE}",
        "half: signature 'serving_default': signature maps 'input' to input 'wrong_in', which Triton model "
        f"'saved_model_half_plus_three' does not have{WHOLE}",
    ]
    details = {row.detail for row in rows(r, "tfserving")["half"]}
    assert "good [predict]" in details  # shown, and the derived serving_default is not shown in its place
    assert not any(d.startswith("serving_default") for d in details)


async def test_tf_version_label_to_a_missing_version(tmp_path):
    r = await report(tmp_path, {"tfserving": {"models": {"half": {
        "triton": "saved_model_half_plus_three", "version_labels": {"stable": 123, "broken": 7}}}}})
    assert errors(r) == ["half: version label 'broken' -> version 7, which Triton model "
                         "'saved_model_half_plus_three' does not serve (ready: 123)"]


async def test_tf_signature_over_a_missing_triton_model(tmp_path):
    r = await report(tmp_path, {"tfserving": {"models": {"half": {
        "triton": "saved_model_half_plus_three",
        "signatures": {"other": {"triton": "gone", "inputs": {"a": "b"}}}}}}})
    assert errors(r) == [f"half: signature 'other' names Triton model 'gone', which Triton does not have{WHOLE}"]


async def test_tf_half_tensors_warn_for_rest_and_half_as_float_silences_it(tmp_path):
    r = await report(tmp_path, metas=[HALF, ECHO, TINY])
    assert r.exit_code == 0
    assert warnings(r, "tfserving") == [
        "half_model: signature 'serving_default': REST cannot carry x_half FP16, y_half FP16 (TF Serving's JSON "
        "has no such type: 501); gRPC can, or set half_as_float: true"]
    r = await report(tmp_path, {"tfserving": {"models": {"half_model": {
        "derived": False, "signatures": {"serving_default": {"half_as_float": True}}}}}}, metas=[HALF, ECHO, TINY])
    assert warnings(r, "tfserving") == []
    (row,) = rows(r, "tfserving")["half_model"]
    assert [str(i) for i in row.inputs] == ["x_half FP32[-1]"]  # what clients see


async def test_tf_classify_classes_must_be_bytes(tmp_path):
    two = ModelMetadata("two", ("1",), "python", (TensorSpec("x", "FP32", F32),),
                        (TensorSpec("s", "FP32", F32), TensorSpec("c", "INT32", F32)))
    r = await report(tmp_path, {"tfserving": {"models": {"two": {"signatures": {
        "cls": {"method": "classify", "features": {"x": "x"}, "scores": "s", "classes": "c"}}}}}}, metas=[two])
    assert "two: signature 'cls': classes output 'c' is INT32, not BYTES (class labels)" in errors(r)


async def test_tf_regress_output_with_several_values_per_example(tmp_path):
    scale = ModelMetadata("scale", ("1",), "python", (TensorSpec("signal", "FP32", (-1, 4)),),
                          (TensorSpec("scaled", "FP32", (-1, 4)),), max_batch_size=8)
    r = await report(tmp_path, {"tfserving": {"models": {"mine": {"triton": "scale", "derived": False, "signatures": {
        "reg": {"method": "regress", "features": {"signal": "signal"}, "output": "scaled"}}}}}},
        metas=[scale, ECHO, TINY])
    msg = ("signature '{}': regress output 'scaled' has shape [-1, 4]; Regress needs one value per example "
           "([batch] or [batch, 1])")
    assert errors(r, "tfserving") == ["mine: " + msg.format("reg")]  # configured: an error
    assert warnings(r, "tfserving") == ["scale: " + msg.format("tensorflow/serving/regress")]  # derived: a warning


# -- GRPS findings ------------------------------------------------------------------------------
async def test_grps_configured_name_on_a_missing_model_or_version(tmp_path):
    r = await report(tmp_path, {"grps": {"models": {
        "a-1.0.0": {"triton_model": "gone"},
        "b-1.0.0": {"triton_model": "grps_echo", "triton_version": 9}}}})
    assert errors(r, "grps") == [
        "a-1.0.0: configured name maps to Triton model 'gone', which Triton does not serve: requests get "
        "'Not found model: a-1.0.0'",
        "b-1.0.0: configured name maps to Triton model 'grps_echo' version '9', which Triton does not serve: "
        "requests get 'Not found model: b-1.0.0'"]


async def test_grps_default_model_missing(tmp_path):
    r = await report(tmp_path, {"grps": {"default_model": "nothing-3"}})
    assert errors(r, "grps") == ["nothing-3: default_model maps to Triton model 'nothing' version '3', which "
                                 "Triton does not serve: requests get 'Not found model: nothing-3'"]


async def test_grps_input_names_and_dtypes_the_mapping_cannot_use(tmp_path):
    r = await report(tmp_path, {"grps": {"models": {
        "a-1": {"triton_model": "grps_echo", "str_input": "wrong"},
        "b-1": {"triton_model": "grps_echo", "ndarray_input": "text"},
        "c-1": {"triton_model": "saved_model_half_plus_three", "str_input": "x"}}}})
    assert errors(r, "grps") == [
        "a-1: str_input 'wrong': str_data requests fail: model 'grps_echo' has no input 'wrong'; it expects: "
        "text BYTES [1]",
        "b-1: ndarray_input 'text' is BYTES: ndarray requests send FP32 and Triton refuses them",
        "c-1: str_input 'x': str_data requests fail: input 'x' of model 'saved_model_half_plus_three' is FP32; "
        "got b'check'",
    ]


async def test_grps_outputs_and_constants(tmp_path):
    r = await report(tmp_path, {"grps": {"models": {
        "a-1": {"triton_model": "saved_model_half_plus_three", "str_output": "y"},
        "b-1": {"triton_model": "grps_echo", "ndarray_output": "text_out"},
        "c-1": {"triton_model": "saved_model_half_plus_three", "inputs": {"x": "many", "no_such": 1}}}}})
    assert errors(r, "grps") == [
        "a-1: str_output 'y' is not a BYTES output of model 'saved_model_half_plus_three' (it has: y FP32 [-1]); "
        "str_data answers fall back to gtensors",
        "b-1: ndarray_output 'text_out': return-ndarray answers fail: NDArray only support float32 "
        "(outputs: text_out BYTES [1])",
        "c-1: constant input 'x': input 'x' of model 'saved_model_half_plus_three' is FP32; got 'many'",
    ]
    assert warnings(r, "grps") == ["c-1: constant input 'no_such' is ignored: model 'saved_model_half_plus_three' "
                                   "has no such input (it expects: x FP32 [-1])"]


# -- MindIE findings ----------------------------------------------------------------------------
async def test_mindie_text_family_on_a_non_decoupled_model(tmp_path):
    r = await report(tmp_path, {"mindie": {"aliases": {"llama2_7b": "text_unary"}}},
                     metas=[TINY, TEXT_NOT_DECOUPLED])
    (msg,) = errors(r, "mindie")
    assert msg.startswith("llama2_7b: 'llama2_7b' (alias of 'text_unary'): Triton model 'text_unary' is not decoupled")


async def test_mindie_alias_to_a_missing_model_is_an_error_unless_it_is_the_built_in_one(tmp_path):
    r = await report(tmp_path, {"mindie": {"aliases": {"llama2_7b": "tiny_llm", "gpt": "gone"}}})
    assert errors(r, "mindie") == ["gpt: 'gpt' (alias of 'gone'): Triton has no model 'gone'; requests get "
                                   "'Model gpt not found.'"]
    r = await report(tmp_path, metas=[HP3, ECHO])  # no tiny_llm; the default alias llama2_7b -> tiny_llm
    assert r.exit_code == 0
    assert warnings(r, "mindie")[0].startswith("llama2_7b: 'llama2_7b' (alias of 'tiny_llm'): Triton has no model")


async def test_mindie_listed_model_missing_or_not_fitting_its_profile(tmp_path):
    no_max = ModelMetadata("no_max", ("1",), "python", (TensorSpec("text_input", "BYTES", (1,)),),
                           (TensorSpec("text_output", "BYTES", (1,)),), decoupled=True)
    r = await report(tmp_path, {"mindie": {"expose": "listed", "aliases": {},
                                           "models": {"gone": {}, "no_max": {"profile": "trtllm"}}}},
                     metas=[no_max])
    assert errors(r, "mindie") == [
        "gone: 'gone': Triton has no model 'gone'; requests get 'Model gone not found.'",
        "no_max: profile trtllm: model no_max has no 'max_tokens' input; it does not fit profile trtllm"]


async def test_mindie_without_any_llm_warns(tmp_path):
    r = await report(tmp_path, {"mindie": {"aliases": {}}}, metas=[HP3, ECHO])
    assert warnings(r, "mindie") == ["*: no text LLM is served (a decoupled Triton model with text_input and "
                                     "text_output): every MindIE route answers 404"]
    assert r.exit_code == 0


async def test_mindie_prefill_role_over_a_model_that_cannot_split(tmp_path):
    r = await report(tmp_path, {"mindie": {"aliases": {}, "pd": {"role": "prefill"}}}, metas=[vllm_meta("v")])
    assert warnings(r, "mindie")[0].startswith("v: role prefill: model 'v' cannot split phases (profile vllm")
    assert rows(r, "mindie")["pd:prefill"][0].detail == "prefill, phase_split true, D port 1025"


async def test_mindie_coordinator_lists_and_probes_its_peers(tmp_path):
    closed = f"127.0.0.1:{free_port()}"
    r = await report(tmp_path, {"mindie": {"pd": {"role": "coordinator", "prefill": [closed], "decode": [closed]}}})
    assert rows(r, "mindie")["pd:coordinator"][0].detail == f"coordinator: prefill {closed}; decode {closed}; standard -"
    assert [w.split(":")[0] for w in warnings(r, "mindie")] == ["pd", "pd"]
    assert r.exit_code == 0


# -- V2, Triton and the report ------------------------------------------------------------------
async def test_v2_lists_unserved_versions_as_warnings(tmp_path):
    index = [ModelIndexEntry("saved_model_half_plus_three", "123", "READY"),
             ModelIndexEntry("broken", "1", "UNAVAILABLE", "load failed")]
    r = await report(tmp_path, metas=[HP3], index=index)
    assert warnings(r, "v2") == ["broken: version 1 is UNAVAILABLE: load failed: V2 calls to it fail"]
    assert rows(r, "v2")["saved_model_half_plus_three"][0].detail.startswith("READY, python;")


async def test_triton_unreachable_is_one_error_and_nothing_else(tmp_path):
    class Down(Upstream):
        async def repository_index(self):
            raise GatewayError(ErrorKind.UNAVAILABLE, "failed to connect to all addresses")

    r = await check.collect(load(tmp_path), Down(metas=[HP3]))
    assert (r.reachable, r.rows, r.exit_code) == (False, [], 1)
    assert errors(r) == ["127.0.0.1:1: Triton unreachable at 127.0.0.1:1: failed to connect to all addresses "
                         "(is it running? upstream.grpc in the config names it)"]


async def test_disabled_dialects_are_skipped(tmp_path):
    r = await report(tmp_path, {"tfserving": {"models": {"half": {"triton": "gone"}}}},
                     listeners={"tfserving_rest": {"enabled": False}, "tfserving_grpc": {"enabled": False}})
    assert r.errors == 0 and not rows(r, "tfserving")
    assert {"name": "tfserving", "enabled": False, "listeners": {}} in r.dialects


async def test_a_failing_dialect_check_is_an_error_and_the_others_still_report(tmp_path):
    class Broken(Upstream):
        async def model_metadata(self, model, version=""):
            if model == "tiny_llm":
                raise GatewayError(ErrorKind.UNAVAILABLE, "Triton went away")
            return await super().model_metadata(model, version)

    r = await check.collect(load(tmp_path), Broken(metas=[HP3, TINY]))
    assert rows(r, "tfserving")  # reported
    assert any(e.startswith("*: check could not complete: Triton went away") for e in errors(r))


def test_table_shows_sections_rows_and_findings(tmp_path):
    r = check.Report("127.0.0.1:1", True, True, [{"name": "tfserving", "enabled": True,
                                                   "listeners": {"tfserving_rest": 8501}}])
    r.rows.append(findings.Row("tfserving", "half", "hp3", "123", (findings.Io("input", "x", "FP32", (-1,)),), (),
                            "serving_default [predict]"))
    r.findings.append(findings.Finding("error", "tfserving", "half", "boom"))
    text = check.render_table(r)
    assert "tfserving (tfserving_rest :8501)" in text
    assert "  half  hp3           123      serving_default [predict]" in text
    assert "\n      in:  input=x FP32[-1]\n" in text
    assert "ERROR   tfserving half: boom" in text
    assert text.endswith("1 error(s), 0 warning(s)")


# -- the CLI ------------------------------------------------------------------------------------
def _config(tmp_path) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"upstream": {"grpc": f"127.0.0.1:{free_port()}", "retries": 1}}))
    return str(path)


def test_cli_unreachable_triton_exits_1_with_a_table(tmp_path, capsys):
    assert cli.main(["check", "--config", _config(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert ": unreachable" in out and "ERROR   triton" in out and "Triton unreachable at" in out


def test_cli_json_schema(tmp_path, capsys):
    assert cli.main(["check", "--config", _config(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"upstream", "triton", "dialects", "rows", "findings", "errors", "warnings"}
    assert doc["triton"] == {"reachable": False, "ready": False}
    assert (doc["errors"], doc["warnings"]) == (1, 0)
    assert set(doc["findings"][0]) == {"level", "dialect", "name", "message"}


async def test_json_rows_schema(tmp_path):
    r = await report(tmp_path)
    doc = json.loads(json.dumps(r.as_json()))
    row = next(x for x in doc["rows"] if x["dialect"] == "tfserving" and x["name"] == HP3.name)
    assert set(row) == {"dialect", "name", "model", "version", "inputs", "outputs", "detail"}
    assert row["inputs"] == [{"alias": "x", "name": "x", "datatype": "FP32", "shape": [-1]}]
    assert [d["name"] for d in doc["dialects"]] == ["v2", "tfserving", "grps", "mindie"]


def test_cli_bad_config_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("upstream: {grpc: 1}\n")
    assert cli.main(["check", "--config", str(path)]) == 2


@pytest.mark.parametrize("level,code", [("warning", 0), ("error", 1)])
def test_exit_code_follows_errors_only(level, code):
    r = check.Report("x", True, True)
    r.findings.append(findings.Finding(level, "grps", "n", "m"))
    assert r.exit_code == code


# -- dialects.<name>.triton_models: check sees what the dialect's requests will see ------------------
async def test_a_mapping_outside_the_dialects_triton_models_is_an_error(tmp_path):
    grps = {"triton_models": ["grps_echo"],
            "models": {"half-1.0.0": {"triton_model": "saved_model_half_plus_three", "ndarray_input": "x",
                                      "ndarray_output": "y"}}}
    r = await report(tmp_path, {"grps": grps})
    assert any(e.startswith("half-1.0.0:") and "saved_model_half_plus_three" in e for e in errors(r, "grps")), r.findings
    assert not errors(r, "tfserving")  # the other dialects still reach every model
    r = await report(tmp_path, {"grps": {**grps, "triton_models": []}})
    assert not errors(r, "grps"), r.findings
