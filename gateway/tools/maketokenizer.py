"""Make the small byte-level BPE tokenizer of model_repository_trtllm/ (nothing downloaded).

    python -m gateway.tools.maketokenizer model_repository_trtllm/tokenizer

A Hugging Face tokenizer directory as real models ship one: ``tokenizer.json`` (trained here with
the ``tokenizers`` library on the corpus below) and ``tokenizer_config.json`` (special tokens,
``chat_template``: ChatML with Hermes-style tools, the layout Qwen 2.5 uses). Byte-level, so a
character outside the merges (``東``, ``🙂``) is several tokens: a stream must not cut it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 700

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Machine learning is the study of programs that improve with experience.",
    "Triton serves models over HTTP and gRPC; the gateway speaks the dialects clients know.",
    "A token is a piece of text: a word, part of a word, or a single byte.",
    "The weather in Paris is mild today, with a light breeze and a few clouds.",
    "Deterministic replies make tests easy to read and easy to predict.",
    "system user assistant tool function name arguments content role",
    "You are a helpful assistant. Answer briefly and precisely.",
    "get_weather city unit celsius fahrenheit location forecast temperature",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "<tool_call> </tool_call> <tools> </tools> <tool_response> </tool_response>",
    "one two three four five six seven eight nine ten hello world",
    "naive cafe resume: naïve café résumé, and a few words from elsewhere.",
]


def chat_template() -> str:
    """ChatML; tools listed in the system turn inside <tools></tools>, calls as <tool_call> JSON."""
    return (
        "{%- if tools %}"
        "{{- '<|im_start|>system\\n' }}"
        "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
        "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
        "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
        "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
        "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
        "{%- elif messages[0].role == 'system' %}"
        "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- for message in messages %}"
        "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- elif message.role == 'assistant' %}"
        "{{- '<|im_start|>assistant' }}"
        "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
        "{%- for tool_call in message.tool_calls or [] %}"
        "{%- set call = tool_call.function if tool_call.function is defined else tool_call %}"
        "{{- '\\n<tool_call>\\n{\"name\": \"' + call.name + '\", \"arguments\": ' }}"
        "{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}"
        "{{- '}\\n</tool_call>' }}"
        "{%- endfor %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- elif message.role == 'tool' %}"
        "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


def build(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    added = {str(tok.token_to_id(s)): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True} for s in SPECIAL}
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "chat_template": chat_template(),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else "model_repository_trtllm/tokenizer"))
