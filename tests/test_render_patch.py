"""Turning a feature off reaches a target that merges (issue 17, point 3).

* RFC 6902 (JSON Patch): :func:`apply_patch` is checked against the RFC's Appendix A examples,
  and ``apply_patch(old, json_patch(old, new)) == new`` on real renderings.
* SONiC ``config load`` is ``sonic-cfggen -j FILE --write-to-db``, i.e.
  ``ConfigDBConnector.mod_config``: per key, the file's fields are written with HMSET and
  "extra entries/fields in the db which are not in the data are kept"; a key given as null is
  deleted, a table given as null is deleted (sonic-swss-common ``common/configdb``).
  :func:`config_load` below is that rule. What ``pfc config priority off`` writes for no
  lossless priority is ``pfc_enable: ""`` (sonic-utilities ``pfc/main.py``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.model import load_topology
from controller.qos.validate import load_policy_checked
from controller.render import render_policy
from controller.render.patch import PatchError, apply_patch, json_patch, pointer
from tests.conftest import ROOT

ROCE = ROOT / "policies" / "qos_roce.yaml"
TOPO = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"

APPENDIX_A = [
    # (RFC 6902 section, document, patch, result or None for an error)
    ("A.1", {"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}],
     {"baz": "qux", "foo": "bar"}),
    ("A.2", {"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
     {"foo": ["bar", "qux", "baz"]}),
    ("A.3", {"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ("A.4", {"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}],
     {"foo": ["bar", "baz"]}),
    ("A.5", {"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
     {"baz": "boo", "foo": "bar"}),
    ("A.6", {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
     [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
     {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
    ("A.7", {"foo": ["all", "grass", "cows", "eat"]},
     [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
     {"foo": ["all", "cows", "eat", "grass"]}),
    ("A.8", {"baz": "qux", "foo": ["a", 2, "c"]},
     [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
     {"baz": "qux", "foo": ["a", 2, "c"]}),
    ("A.9", {"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}], None),
    ("A.10", {"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
     {"foo": "bar", "child": {"grandchild": {}}}),
    ("A.12", {"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}], None),
    ("A.14", {"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}],
     {"/": 9, "~1": 10}),
    ("A.16", {"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
     {"foo": ["bar", ["abc", "def"]]}),
]


@pytest.mark.parametrize(("section", "doc", "patch", "result"), APPENDIX_A,
                         ids=[a[0] for a in APPENDIX_A])
def test_apply_patch_follows_rfc6902_appendix_a(section, doc, patch, result):
    before = copy.deepcopy(doc)
    if result is None:
        with pytest.raises(PatchError):
            apply_patch(doc, patch)
    else:
        assert apply_patch(doc, patch) == result
    assert doc == before  # never changed in place; an error applies nothing (RFC 6902 §5)


def test_pointer_escapes_per_rfc6901():
    assert pointer(["a/b", "m~n", "Ethernet0|3"]) == "/a~1b/m~0n/Ethernet0|3"


def test_patch_between_documents_round_trips():
    old = {"T": {"k1": {"a": "1", "b": "2"}, "k2": {"x": "y"}}, "L": [1, 2]}
    new = {"T": {"k1": {"a": "1", "c": "3"}, "k3": {"z": "w"}}, "L": [1, 3], "N": {}}
    ops = json_patch(old, new)
    assert {"op": "remove", "path": "/T/k1/b"} in ops and {"op": "remove", "path": "/T/k2"} in ops
    assert {"op": "add", "path": "/T/k3", "value": {"z": "w"}} in ops
    assert {"op": "replace", "path": "/L", "value": [1, 3]} in ops
    assert apply_patch(old, ops) == new
    assert json_patch(new, new) == []


# -- SONiC: config load merges --------------------------------------------------------------------
def config_load(db: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """CONFIG_DB after ``config load`` of ``doc`` (ConfigDBConnector.mod_config semantics)."""
    out = copy.deepcopy(db)
    for table, rows in doc.items():
        if rows is None:
            out.pop(table, None)
            continue
        for key, fields in rows.items():
            if fields is None:
                out.get(table, {}).pop(key, None)
            else:
                out.setdefault(table, {}).setdefault(key, {}).update(fields)
    return out


def sonic(text: str, write) -> dict[str, Any]:  # noqa: ANN001
    fabric = load_topology(TOPO)
    pol = load_policy_checked(write(text), fabric, "sonic").policy
    return json.loads(render_policy(pol, fabric, "sonic")["leaf1.config_db.json"])


OFF = {  # what the "disable a feature" edits remove from policies/qos_roce.yaml
    "lossless": ("    lossless: true\n", ""),
    "pfc": ("pfc:\n  lossless_priorities: [3]\n", "pfc:\n  lossless_priorities: []\n"),
    "ecn": ("    - {class: bulk, mode: dctcp, k: auto}\n", ""),
    "rate limit": ("    rate_limit: 1Gbps     # strict priority must not starve the lossless class\n",
                   ""),
}


def test_sonic_rendering_turns_features_off_explicitly_under_config_load(write):
    text = ROCE.read_text()
    old = sonic(text, write)
    new_text = text
    for a, b in OFF.values():
        assert new_text.count(a) == 1, a
        new_text = new_text.replace(a, b)
    new = sonic(new_text, write)
    merged = config_load(old, new)
    # every field the new rendering writes has its new value after the merge ...
    for table, rows in new.items():
        for key, fields in rows.items():
            for field, value in fields.items():
                assert merged[table][key][field] == value, (table, key, field)
    # ... and those are SONiC's explicit "off" values for what the new policy dropped
    assert merged["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == ""  # PFC off on the port
    assert merged["QUEUE"]["Ethernet0|0"]["wred_profile"] == "AIFABRIC_ECN_OFF"  # bulk: no ECN
    assert merged["WRED_PROFILE"]["AIFABRIC_ECN_OFF"]["ecn"] == "ecn_none"
    control = merged["QUEUE"]["Ethernet0|6"]["scheduler"]
    assert "pir" not in merged["SCHEDULER"][control]  # the control class is unshaped now
    # without the explicit field the merge keeps the old value: PFC would stay on
    stale = config_load(old, {"PORT_QOS_MAP": {"Ethernet0": {"scheduler": "x"}}})
    assert stale["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == "3"
    # what only a deletion removes (PFC watchdog rows) is in the patch for config apply-patch
    ops = json_patch(old, new)
    assert {"op": "remove", "path": "/PFC_WD"} in ops
    assert apply_patch(old, ops) == new


def test_policy_diff_patch_format_is_applicable(write):
    text = ROCE.read_text()
    new = write(text.replace(*OFF["pfc"]).replace(*OFF["lossless"]), "new.yaml")
    res = CliRunner().invoke(main, ["policy", "diff", str(ROCE), str(new), "-t", str(TOPO),
                                    "--target", "sonic", "--format", "patch"])
    assert res.exit_code == 1, res.output  # like diff(1): something differs
    blocks = res.stdout.split("# ")[1:]
    patches = {b.split("\n", 1)[0]: json.loads(b.split("\n", 1)[1]) for b in blocks}
    assert sorted(patches) == ["leaf1.config_db.json", "leaf2.config_db.json",
                               "spine1.config_db.json", "spine2.config_db.json"]
    fabric = load_topology(TOPO)
    old_doc = json.loads(render_policy(load_policy_checked(ROCE, fabric, "sonic").policy, fabric,
                                       "sonic")["leaf1.config_db.json"])
    new_doc = json.loads(render_policy(load_policy_checked(new, fabric, "sonic").policy, fabric,
                                       "sonic")["leaf1.config_db.json"])
    leaf1 = patches["leaf1.config_db.json"]
    assert {"op": "replace", "path": "/PORT_QOS_MAP/Ethernet0/pfc_enable", "value": ""} in leaf1
    assert apply_patch(old_doc, leaf1) == new_doc
    same = CliRunner().invoke(main, ["policy", "diff", str(ROCE), str(ROCE), "-t", str(TOPO),
                                     "--format", "patch"])
    assert same.exit_code == 0 and "[]" in same.stdout
