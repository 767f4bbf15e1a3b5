"""tensorflow-serving-api's own stubs against :8500: version labels (the plain client's predict, metadata,
classify, regress and status are in tests/acceptance.py, which the compose test runs too).

The wheel is installed without its TensorFlow dependency (`make install`, requirements/
legacy-clients.txt); the TensorFlow core messages it imports (tensor, types, example, meta_graph,
error codes) are compiled here from proto/, the same wire contract TensorFlow ships.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import acceptance
from tests.support import ROOT

LEGACY = ROOT / ".run" / "legacy-clients"


@pytest.fixture(scope="module")
def tensorflow_protos() -> Path:
    return acceptance.compiled_tensorflow_protos()  # the acceptance set's compiled TensorFlow messages


NOT_FOUND_7 = ["NOT_FOUND", "Servable not found for request: Specific(hp3, 7)"]
HP3_STABLE = ["output", [3.5, 4.0], ["hp3", "version", 123, "serving_default"]]
# tests/config/tfserving.yaml's four, and the two derived over half_plus_three's one float output
HP3_SIGNATURES = ["classify_x_to_y", "multi", "regress_x_to_y", "serving_default", "tensorflow/serving/classify",
                  "tensorflow/serving/regress"]


def test_version_labels_over_grpc_are_tf_servings_answers(gateway, tensorflow_protos):
    """ModelSpec.version_label with tensorflow-serving-api's stubs (hp3: stable and canary → 123,
    broken → 7, which Triton lacks; tests/config/tfserving.yaml). TF Serving's answers, from its
    source: ServerCore::ServableRequestFromModelSpec resolves the label first
    (GetModelVersionForLabel: INVALID_ARGUMENT "Unrecognized servable version label: L" for a label,
    "" included, that the model, known or not, has not got), then looks for Specific(name, version)
    (NOT_FOUND); version and label are a oneof (model.proto), so of both the last one set or sent
    counts; answers carry name and version, never the label (util.cc MakeModelSpec,
    get_model_metadata_impl.cc); GetModelStatus reads only model_spec.version (get_model_status_impl.cc)."""
    env = dict(os.environ, PYTHONPATH=f"{tensorflow_protos}:{LEGACY}")
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "legacy" / "tfserving_client.py"),
                          gateway.target("tfserving_grpc"), "labels"], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tensorflow_protos)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "label": HP3_STABLE,
        "label_of_tf_test_model": ["y", [2.5, 3.0], ["saved_model_half_plus_two_2_versions", "version", 123,
                                                     "serving_default"]],
        "version_then_label": HP3_STABLE,
        "label_then_version": NOT_FOUND_7,
        "wire_label_then_version": NOT_FOUND_7,
        "wire_version_then_label": HP3_STABLE,
        "unknown_label": ["INVALID_ARGUMENT", "Unrecognized servable version label: nope"],
        "empty_label": ["INVALID_ARGUMENT", "Unrecognized servable version label: "],
        "label_of_unknown_model": ["INVALID_ARGUMENT", "Unrecognized servable version label: stable"],
        "label_of_model_without_labels": ["INVALID_ARGUMENT", "Unrecognized servable version label: stable"],
        "label_to_missing_version": NOT_FOUND_7,
        "metadata": [["hp3", "version", 123, ""], HP3_SIGNATURES],
        "metadata_unknown_label": ["INVALID_ARGUMENT", "Unrecognized servable version label: nope"],
        "regress": [[4.0], ["hp3", "version", 123, "regress_x_to_y"]],
        "status_ignores_the_label": [[123, "AVAILABLE"]],
    }
