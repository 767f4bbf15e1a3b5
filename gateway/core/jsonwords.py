"""rapidjson's parse-error words (``GetParseError_En``) for the stdlib parser's messages.

TF Serving and Triton both parse request bodies with rapidjson and quote its error text; the
gateway re-reads a refused body with the stdlib parser and words its error as rapidjson would.
Each dialect adds the offset as its original does (TF Serving: ``at offset: n``, Triton: ``at n``).
"""

STDLIB_TO_RAPIDJSON = {
    "Expecting value": "Invalid value.",
    "Expecting ',' delimiter": "Missing a comma or ']' after an array element.",  # '}' after an object member: by context
    "Expecting property name enclosed in double quotes": "Missing a name for object member.",
    "Expecting ':' delimiter": "Missing a colon after a name of object member.",
    "Unterminated string starting at": "Missing a closing quotation mark in string.",
    "Invalid control character at": "Invalid encoding in string.",
    "Invalid \\escape": "Invalid escape character in string.",
    "Invalid \\uXXXX escape": "Incorrect hex digit after \\u escape in string.",
    "Extra data": "The document root must not be followed by other values.",
}
