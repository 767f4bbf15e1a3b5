"""What the stand-in models share: the model's tokenizer and reading request tensors.

The tokenizer is the Hugging Face directory named by a model's ``tokenizer_dir`` parameter (a
relative path is taken from the model's directory), loaded with the ``tokenizers`` library as the
originals load it with ``transformers.AutoTokenizer``: ``tokenizer.json`` plus the special tokens
of ``tokenizer_config.json``.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


def parameter(model_config: dict, key: str, default: str = "") -> str:
    value = model_config.get("parameters", {}).get(key, {}).get("string_value", default)
    return default if value.startswith("${") else value


def flag(text: str) -> bool:
    return text.strip().lower() in ("true", "1", "t", "y", "yes")


class HfTokenizer:
    def __init__(self, model_config: dict, model_dir: str):
        path = parameter(model_config, "tokenizer_dir")
        if not path:
            raise ValueError("parameter tokenizer_dir is not set")
        path = path if os.path.isabs(path) else os.path.normpath(os.path.join(model_dir, path))
        self.tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        eos = _content(config.get("eos_token"))
        pad = _content(config.get("pad_token")) or eos
        self.end_id = self.tok.token_to_id(eos)
        self.pad_id = self.tok.token_to_id(pad)

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


def _content(token):
    return token.get("content") if isinstance(token, dict) else token


def array(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    return None if t is None else t.as_numpy()


def scalar(request, name, default):
    v = array(request, name)
    if v is None or v.size == 0:
        return default
    return v.reshape(-1)[0].item()


def request_parameters(request) -> dict:
    try:
        return json.loads(request.parameters() or "{}")
    except (AttributeError, ValueError):
        return {}


def word_list(tokenizer: HfTokenizer, words) -> np.ndarray:
    """TensorRT-LLM's word-list format for one request: [1, 2, N] INT32, the words' token ids
    one after another, then each word's end offset, padded with 0 and -1."""
    ids, offsets = [], []
    for w in words if words is not None else ():
        text = w.decode("utf-8") if isinstance(w, bytes) else str(w)
        for part in (p for p in text.split(",") if p):
            ids += tokenizer.encode(part)
            offsets.append(len(ids))
    n = max(1, len(ids))
    out = np.zeros((1, 2, n), dtype=np.int32)
    out[0, 0, : len(ids)] = ids
    out[0, 1, :] = -1
    out[0, 1, : len(offsets)] = offsets
    return out


def words_from_list(value) -> list:
    """[1, 2, N] word list -> token-id sequences."""
    if value is None:
        return []
    flat, ends = value.reshape(2, -1)
    out, start = [], 0
    for end in ends:
        if end < 0:
            break
        out.append([int(i) for i in flat[start:end]])
        start = int(end)
    return [w for w in out if w]
