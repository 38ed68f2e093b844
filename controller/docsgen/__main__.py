"""``python -m controller.docsgen pages DIR``: write the generated reference pages to DIR.
``python -m controller.docsgen dashboard [--check]``: write ``deploy/grafana/aifabric.json``
(``--check``: write nothing, exit 1 when the committed file is not what would be generated)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "pages":
        from controller.docsgen import generate_pages

        out = Path(args[1])
        for rel, text in generate_pages().items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
        return 0
    if args and args[0] == "dashboard" and args[1:] in ([], ["--check"]):
        from controller.docsgen.grafana import DASHBOARD, dashboard_json

        text = dashboard_json()
        if args[1:] == ["--check"]:
            if not DASHBOARD.is_file() or DASHBOARD.read_text() != text:
                print(f"{DASHBOARD} is not what controller/docsgen/grafana.py generates; run "
                      "python -m controller.docsgen dashboard", file=sys.stderr)
                return 1
            return 0
        DASHBOARD.parent.mkdir(parents=True, exist_ok=True)
        DASHBOARD.write_text(text)
        print(f"wrote {DASHBOARD}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
