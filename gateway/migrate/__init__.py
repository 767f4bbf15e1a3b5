"""Migration into Triton and the gateway's mapping: ``gateway import tfserving`` and ``gateway import grps``.

    tfserving.py     a TF Serving models.config or base path -> model_repository/ + dialects.tfserving
    source.py        what TF Serving would serve: models.config, version directories, SavedModel signatures
    repository.py    Triton's side: config.pbtxt (GPU and CPU), the CPU model.py, files written only when changed
    tf_convert.py    the SavedModel -> ONNX step, run in TensorFlow's own environment (.venv-tf)
    yamlfile.py      the gateway config's dialects section merged in place, comments kept
    grps.py          GRPS's inference.yml -> dialects.grps

No dialect imports this package; it reads the dialects' config schemas (what it writes must validate)
and the TF protos under gateway/_proto.
"""
