"""Regenerate the committed gRPC code from ``aifabric.proto`` (needs grpcio-tools, a dev
dependency): ``.venv/bin/python -m controller.northbound.generate [--check]``.

The code goes to ``controller/northbound/v1/`` as ``aifabric_pb2.py``, ``aifabric_pb2.pyi`` and
``aifabric_pb2_grpc.py``, with the grpc module's import made package-relative. ``--check``
writes nothing and exits 1 when the committed files differ from what would be generated.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "aifabric.proto"
OUT = HERE / "v1"
FILES = ("aifabric_pb2.py", "aifabric_pb2.pyi", "aifabric_pb2_grpc.py")


def generate() -> dict[str, str]:
    """The generated files' texts, by name. Raises RuntimeError when protoc fails."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        rc = protoc.main(["grpc_tools.protoc", f"-I{HERE}", f"--python_out={tmp}",
                          f"--pyi_out={tmp}", f"--grpc_python_out={tmp}", str(PROTO)])
        if rc != 0:
            raise RuntimeError(f"protoc failed on {PROTO} (exit {rc})")
        out = {name: (Path(tmp) / name).read_text() for name in FILES}
    out["aifabric_pb2_grpc.py"] = out["aifabric_pb2_grpc.py"].replace(
        "import aifabric_pb2 as aifabric__pb2", "from . import aifabric_pb2 as aifabric__pb2")
    return out


def stale() -> list[str]:
    """Names of committed files that differ from freshly generated ones."""
    return [n for n, text in generate().items()
            if not (OUT / n).is_file() or (OUT / n).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--check" in args:
        bad = stale()
        for n in bad:
            print(f"{OUT / n} is not what {PROTO.name} generates; run "
                  "python -m controller.northbound.generate", file=sys.stderr)
        return 1 if bad else 0
    OUT.mkdir(exist_ok=True)
    for n, text in generate().items():
        (OUT / n).write_text(text)
        print(f"wrote {OUT / n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
