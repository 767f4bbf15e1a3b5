"""Model status and metadata as TF Serving's REST API prints them: protobuf's C++ JSON printer.

``ToJsonString`` (tensorflow_serving/model_servers/http_rest_api_util.cc) calls
``MessageToJsonString`` with ``add_whitespace`` and ``always_print_fields_with_no_presence``
(metadata also with ``preserve_proto_field_names``). What the C++ printer writes
(src/google/protobuf/json/internal/unparser.cc ``WriteMessage``/``WriteFields``/``WriteRepeated``/
``WriteMap``/``MessageToJsonStream``, writer.h ``NewLine``/``Push``, writer.cc ``WriteEscapedUtf8``):

* fields in field-number order: every field that is set, plus, with
  ``always_print_fields_with_no_presence``, every repeated/map field and every implicit-presence
  scalar (proto3 non-optional, outside a oneof) even at its default; oneof members and message
  fields only when set;
* ``{``, then each field on a new line indented one space per open level, ``"name": value``, ``,``
  between fields, the closing ``}`` on a new line at the parent's indent; ``{}`` / ``[]`` when empty;
  repeated elements and map entries likewise; a final newline after the document;
* names: the ``json_name`` (TF Serving's status protos declare snake_case ones) or, with
  ``preserve_proto_field_names``, the proto name; enums by name; 64-bit integers quoted;
  ``google.protobuf.Int64Value`` as its quoted value; strings escaped as ``WriteEscapedUtf8``.

Map entries: C++ iterates its hash map (unordered, seeded per process); they are written here in
sorted key order.

The metadata answer is then assembled by hand, exactly as ``ToJsonString(GetModelMetadataResponse)``
concatenates it (``metadata_answer``).
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor as FD

from gateway.core import jsonescape

_INT64 = (FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_SINT64, FD.TYPE_FIXED64, FD.TYPE_SFIXED64)
_WRAPPERS = {"google.protobuf.Int64Value", "google.protobuf.UInt64Value", "google.protobuf.Int32Value",
             "google.protobuf.UInt32Value", "google.protobuf.BoolValue", "google.protobuf.StringValue"}


def quoted(text: str) -> str:
    return '"' + jsonescape.escape(text) + '"'  # writer.cc MustEscape


class _Printer:
    def __init__(self, proto_names: bool):
        self.proto_names = proto_names

    def message(self, msg, level: int, out: list[str]) -> None:
        desc = msg.DESCRIPTOR
        if desc.full_name in _WRAPPERS:
            self.scalar(desc.fields_by_name["value"], msg.value, out)
            return
        fields = [fd for fd in sorted(desc.fields, key=lambda f: f.number) if self.printed(msg, fd)]
        if not fields:
            out.append("{}")
            return
        out.append("{")
        for i, fd in enumerate(fields):
            out.append(("," if i else "") + "\n" + " " * (level + 1))
            out.append(quoted(fd.name if self.proto_names else fd.json_name) + ": ")
            self.field(msg, fd, level + 1, out)
        out.append("\n" + " " * level + "}")

    @staticmethod
    def printed(msg, fd) -> bool:
        if fd.label == FD.LABEL_REPEATED:
            return True  # always_print_fields_with_no_presence
        if fd.has_presence:
            return msg.HasField(fd.name)
        return True  # implicit presence: printed at its default too

    def field(self, msg, fd, level: int, out: list[str]) -> None:
        value = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if not value:
                out.append("{}")
                return
            out.append("{")
            for i, key in enumerate(sorted(value)):
                out.append(("," if i else "") + "\n" + " " * (level + 1) + quoted(str(key)) + ": ")
                if value_fd.type == FD.TYPE_MESSAGE:
                    self.message(value[key], level + 1, out)
                else:
                    self.scalar(value_fd, value[key], out)
            out.append("\n" + " " * level + "}")
        elif fd.label == FD.LABEL_REPEATED:
            if not len(value):
                out.append("[]")
                return
            out.append("[")
            for i, item in enumerate(value):
                out.append(("," if i else "") + "\n" + " " * (level + 1))
                if fd.type == FD.TYPE_MESSAGE:
                    self.message(item, level + 1, out)
                else:
                    self.scalar(fd, item, out)
            out.append("\n" + " " * level + "]")
        elif fd.type == FD.TYPE_MESSAGE:
            self.message(value, level, out)
        else:
            self.scalar(fd, value, out)

    @staticmethod
    def scalar(fd, value, out: list[str]) -> None:
        t = fd.type
        if t in _INT64:
            out.append(f'"{value}"')
        elif t == FD.TYPE_ENUM:
            names = fd.enum_type.values_by_number
            out.append(f'"{names[value].name}"' if value in names else str(value))
        elif t == FD.TYPE_STRING:
            out.append(quoted(value))
        elif t == FD.TYPE_BOOL:
            out.append("true" if value else "false")
        else:  # 32-bit integers (no float, double or bytes field in the messages printed here)
            out.append(str(value))


def message_json(msg, proto_names: bool = False) -> str:
    """MessageToJsonString(add_whitespace, always_print_fields_with_no_presence[, preserve_proto_field_names])."""
    out: list[str] = []
    _Printer(proto_names).message(msg, 0, out)
    out.append("\n")  # MessageToJsonStream ends with writer.NewLine()
    return "".join(out)


def status_answer(response) -> bytes:
    """ToJsonString(GetModelStatusResponse): json_name field names."""
    return message_json(response).encode("utf-8")


def metadata_answer(model_spec, signature_def_map) -> bytes:
    """ToJsonString(GetModelMetadataResponse): the model spec and the SignatureDefMap printed
    separately (proto field names), then joined by hand:
    ``{\\n"model_spec":<spec>,\\n"metadata": {"signature_def": <map>}\\n}\\n``."""
    spec = message_json(model_spec, proto_names=True)
    sigs = message_json(signature_def_map, proto_names=True)
    return ("{\n" + '"model_spec":' + spec + ",\n" + '"metadata": {' + '"signature_def": ' + sigs + "}\n"
            + "}\n").encode("utf-8")
