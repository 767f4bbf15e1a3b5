"""The generation core shared by every text-generation dialect.

    types.py      GenerateRequest, Sampling, Chunk, Token, Done (neutral)
    profiles.py   GenerateRequest -> Triton tensors (trtllm, vllm) and responses -> Chunk
    served.py     served LLM names, aliases, per-model profile / tokenizer / chat template
    service.py    GenerationService.generate: Token events then Done, over Upstream.stream
    chat.py       chat messages -> prompt (jinja2)
    stops.py      stop strings on a text stream
    tokenizers.py token counting when the model reports none
"""
