"""Benchmark of the QoS compiler (not a test): ``python bench/policy_compile.py``.

Builds a leaf-spine of 32 spines × 32 leaves × 16 hosts per leaf (512 hosts at 100 Gbit/s,
400 Gbit/s leaf-spine links): 32 × (16 + 32) + 32 × 32 = 2,560 switch ports, over the 1,024-port
target of issue 3. Loads policies/qos_roce.yaml with every check against that fabric, compiles it,
and renders each target that accepts it; prints the median of a few runs (``time.perf_counter``).
"""

from __future__ import annotations

from pathlib import Path

from timing import timed  # bench/timing.py (sys.path[0] is bench/)

from controller.model import build_leaf_spine
from controller.qos.compile import compile_qos
from controller.qos.validate import check_policy_document
from controller.render import render
from controller.yamlsrc import parse_document

ROOT = Path(__file__).resolve().parent.parent




def main() -> None:
    fabric = build_leaf_spine("bench-32x32x16", 32, 32, 16, 100_000_000_000, 400_000_000_000,
                              1.0, 1.0)
    ports = 2 * len(fabric.links) - len(fabric.hosts)
    text = (ROOT / "policies" / "qos_roce.yaml").read_text()
    doc = parse_document(text, "qos_roce.yaml")
    t_check, checked = timed(lambda: check_policy_document(doc, fabric, "sonic"))
    t_compile, plan = timed(lambda: compile_qos(checked.policy, fabric))
    print(f"fabric {fabric.name}: {len(fabric.switches)} switches, {ports} switch ports")
    print(f"load + checks (target sonic): {t_check * 1e3:8.1f} ms")
    print(f"compile:                      {t_compile * 1e3:8.1f} ms")
    for target in ("tofino", "sonic"):
        t_render, files = timed(lambda target=target: render(plan, target))
        size = sum(len(v) for v in files.values())
        print(f"render {target:<8}              {t_render * 1e3:8.1f} ms "
              f"({len(files)} files, {size / 1e6:.1f} MB)")
        print(f"  total compile+render {target}: {(t_check + t_compile + t_render) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
