"""The gRPC reference, generated from ``controller/northbound/aifabric.proto``.

protoc (grpcio-tools, a dev dependency) parses the file into a ``FileDescriptorSet`` with its
source info, so every service, method, message, field and enum comes with the comments written
beside it (leading, trailing and detached comments, as protoc attributes them); nothing parses
the proto text here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2

from controller.docsgen.markdown import GENERATED_NOTE, code, escape_html, table

PROTO = Path(__file__).resolve().parents[1] / "northbound" / "aifabric.proto"

# descriptor.proto: FileDescriptorProto.message_type = 4, service = 6, enum_type = 5;
# DescriptorProto.field = 2, nested_type = 3, enum_type = 4; ServiceDescriptorProto.method = 2;
# EnumDescriptorProto.value = 2.
_MESSAGE, _ENUM, _SERVICE = 4, 5, 6
_FIELD, _NESTED, _NESTED_ENUM, _METHOD, _VALUE = 2, 3, 4, 2, 2

_SCALAR = {number: name.removeprefix("TYPE_").lower()
           for name, number in descriptor_pb2.FieldDescriptorProto.Type.items()}


def descriptor_set(proto: Path = PROTO) -> descriptor_pb2.FileDescriptorSet:
    """protoc's parse of ``proto`` with source info (comments).

    Raises
    ------
    RuntimeError
        protoc failed (its message is on stderr).
    """
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        rc = protoc.main(["grpc_tools.protoc", f"-I{proto.parent}", f"--descriptor_set_out={out}",
                          "--include_source_info", str(proto)])
        if rc != 0:
            raise RuntimeError(f"protoc failed on {proto} (exit {rc})")
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
    return fds


def _comments(fd: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    out = {}
    for loc in fd.source_code_info.location:
        text = " ".join(" ".join(c.split()) for c in
                        (loc.leading_comments, loc.trailing_comments) if c.strip())
        if text:
            out[tuple(loc.path)] = _escape(text)
    return out


_escape = escape_html


def _type(f: descriptor_pb2.FieldDescriptorProto, package: str) -> str:
    if f.type in (f.TYPE_MESSAGE, f.TYPE_ENUM):
        name = f.type_name.removeprefix(f".{package}.")
        text = f"[{name}](#{name.lower()})"
    else:
        text = code(_SCALAR[f.type])
    if f.label == f.LABEL_REPEATED:
        return f"repeated {text}"
    if f.proto3_optional:
        return f"optional {text}"
    return text


def _file_comment(fd: descriptor_pb2.FileDescriptorProto) -> str:
    """The comment above ``syntax`` (field 12 of FileDescriptorProto), paragraph by paragraph."""
    for loc in fd.source_code_info.location:
        if tuple(loc.path) == (12,):
            blocks = [*loc.leading_detached_comments, loc.leading_comments]
            paras = [p for b in blocks for p in b.split("\n\n") if p.strip()]
            return "\n\n".join(_escape(" ".join(p.split())) for p in paras)
    return ""


def grpc_page(proto: Path = PROTO) -> str:
    """``reference/grpc.md``: the service, its methods and every message."""
    fds = descriptor_set(proto)
    fd = next(f for f in fds.file if Path(f.name).name == proto.name)
    notes = _comments(fd)
    pkg = fd.package
    out = [GENERATED_NOTE.format(what="controller/northbound/aifabric.proto"), "",
           "# gRPC reference", "",
           f"The northbound API, package `{pkg}`, generated from "
           "`controller/northbound/aifabric.proto` (the file ships in the wheel as package "
           "data of `controller.northbound`). Python clients: "
           "`controller.northbound.client.FabricClient`. Calls carry "
           "`authorization: Bearer TOKEN` when the controller runs with tokens; the *role* "
           "column is the least role a token needs for the method "
           "(`controller.security.tokens.NORTHBOUND_METHOD_ROLES`; a method not listed there is "
           "refused to every token). See [TLS and tokens](../operator/tls.md).", ""]
    head = _file_comment(fd)
    if head:
        out += [head, ""]
    from controller.security.tokens import NORTHBOUND_METHOD_ROLES

    for si, svc in enumerate(fd.service):
        out += [f"## Service `{pkg}.{svc.name}`", ""]
        rows = []
        for mi, m in enumerate(svc.method):
            req = m.input_type.removeprefix(f".{pkg}.")
            rep = m.output_type.removeprefix(f".{pkg}.")
            stream = "stream " if m.server_streaming else ""
            role = NORTHBOUND_METHOD_ROLES.get(f"/{pkg}.{svc.name}/{m.name}")
            rows.append((f"`{m.name}`", f"[{req}](#{req.lower()})",
                         f"{stream}[{rep}](#{rep.lower()})",
                         code(role.label) if role is not None else "refused",
                         notes.get((_SERVICE, si, _METHOD, mi), "")))
        out += [table(("method", "request", "reply", "role", "what it does"), rows), ""]
    out += ["## Messages", ""]
    for mi, msg in enumerate(fd.message_type):
        out += _message(msg, (_MESSAGE, mi), notes, pkg)
    for ei, en in enumerate(fd.enum_type):
        out += _enum(en, (_ENUM, ei), notes)
    return "\n".join(out).rstrip() + "\n"


def _message(msg: descriptor_pb2.DescriptorProto, path: tuple[int, ...],
             notes: dict[tuple[int, ...], str], pkg: str) -> list[str]:
    out = [f"### {msg.name} {{#{msg.name.lower()}}}", ""]
    if path in notes:
        out += [notes[path], ""]
    if msg.field:
        out += [table(("field", "number", "type", "meaning"),
                      [(code(f.name), str(f.number), _type(f, pkg),
                        notes.get(path + (_FIELD, i), ""))
                       for i, f in enumerate(msg.field)]), ""]
    else:
        out += ["No fields.", ""]
    for i, sub in enumerate(msg.nested_type):
        out += _message(sub, path + (_NESTED, i), notes, pkg)
    for i, en in enumerate(msg.enum_type):
        out += _enum(en, path + (_NESTED_ENUM, i), notes)
    return out


def _enum(en: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...],
          notes: dict[tuple[int, ...], str]) -> list[str]:
    out = [f"### {en.name} {{#{en.name.lower()}}}", ""]
    if path in notes:
        out += [notes[path], ""]
    out += [table(("value", "number", "meaning"),
                  [(code(v.name), str(v.number), notes.get(path + (_VALUE, i), ""))
                   for i, v in enumerate(en.value)]), ""]
    return out
