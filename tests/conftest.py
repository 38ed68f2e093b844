from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAIN_TOPOLOGY = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
FATTREE_K4 = ROOT / "mininet_labs" / "topologies" / "fattree_k4.yaml"
PINNED_POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
ECMP_POLICY = ROOT / "policies" / "ecmp_two_rings.yaml"


@pytest.fixture
def write(tmp_path: Path):
    """Write a YAML text to a file in tmp_path and return its path."""

    def _write(text: str, name: str = "f.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return _write
