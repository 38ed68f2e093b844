import pytest
from pydantic import ValidationError

from controller.errors import ConfigError
from controller.model import load_topology
from controller.qos.validate import load_valid_policy as load_policy
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY, ROOT


def test_example_policies_load():
    fabric = load_topology(MAIN_TOPOLOGY)
    p = load_policy(PINNED_POLICY, fabric)
    assert p.routing.mode == "pinned"
    assert [c.name for c in p.collectives] == ["ring-a", "ring-b"]
    assert p.collectives[0].ranks == ("h1", "h3", "h5", "h7")
    assert load_policy(ECMP_POLICY, fabric).routing.mode == "ecmp"


def test_every_shipped_policy_is_valid():
    files = sorted((ROOT / "policies").glob("*.yaml"))
    assert files
    for f in files:
        load_policy(f)


def test_policy_model_is_immutable():
    p = load_policy(PINNED_POLICY)
    for obj, field, value in ((p.routing, "mode", "ecmp"), (p, "collectives", ()),
                              (p.collectives[0], "ranks", ("h1", "h2"))):
        with pytest.raises(ValidationError, match="Instance is frozen") as ei:
            setattr(obj, field, value)
        (err,) = ei.value.errors()
        assert (err["type"], err["loc"], err["input"]) == ("frozen_instance", (field,), value)
    assert p.routing.mode == "pinned" and p.collectives[0].ranks == ("h1", "h3", "h5", "h7")


GOOD_HEAD = "version: 1\nrouting:\n  mode: pinned\n"

BAD = [
    ("routing:\n  mode: pinnd\n", "2:9: routing.mode: Input should be 'ecmp' or 'pinned' (got 'pinnd')"),
    ("routing: {mode: ecmp}\nqos: {}\n", "2:1: qos: unknown key"),
    ("collectives: []\n", "1:1: routing: required field is missing"),
    ("version: 2\nrouting: {mode: ecmp}\n", "1:10: version:"),
    (
        GOOD_HEAD + "  ecmp:\n    hash_fields: [ipv4_src, ipv4_src]\n",
        "5:18: routing.ecmp.hash_fields: Value error, a hash field is listed twice",
    ),
    (
        GOOD_HEAD + "  ecmp:\n    hash_fields: [ipv4_src, vlan]\n",
        "5:29: routing.ecmp.hash_fields[1]:",
    ),
    (
        GOOD_HEAD + "collectives:\n  - name: a\n    algorithm: tree\n    ranks: [h1, h2]\n",
        "6:16: collectives[0].algorithm:",
    ),
    (
        GOOD_HEAD + "collectives:\n  - name: a\n    algorithm: ring\n    ranks: [h1]\n",
        "7:12: collectives[0].ranks: Value error, a collective needs at least 2 ranks",
    ),
    (
        GOOD_HEAD + "collectives:\n  - name: a\n    algorithm: ring\n    ranks: [h1, h2, h1]\n",
        "7:12: collectives[0].ranks: Value error, host 'h1' appears twice in ranks",
    ),
    (
        GOOD_HEAD + "collectives:\n  - name: a\n    algorithm: ring\n    ranks: [h1, h2]\n"
        "    dscp: 64\n",
        "8:11: collectives[0].dscp: Input should be less than or equal to 63",
    ),
    (
        GOOD_HEAD + "collectives:\n  - name: a\n    algorithm: ring\n    ranks: [h1, h2]\n"
        "    l4: {proto: tcp, dst_port: 0}\n",
        "8:32: collectives[0].l4.dst_port:",
    ),
    (
        GOOD_HEAD + "collectives:\n  - name: a\n    algorithm: ring\n    ranks: [h1, h2]\n"
        "    colour: red\n",
        "8:5: collectives[0].colour: unknown key",
    ),
    (
        GOOD_HEAD + "routing:\n  mode: ecmp\n",
        "4:1: duplicate key",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_policies_name_file_line_col_and_field(write, text, expected):
    path = write(text, "policy.yaml")
    with pytest.raises(ConfigError) as ei:
        load_policy(path)
    rendered = str(ei.value)
    assert rendered.startswith(f"{path}:")
    assert expected.replace("Value error, ", "") in rendered, rendered


def test_all_problems_reported_at_once(write):
    path = write("routing:\n  mode: x\n  extra: 1\nfoo: 2\n")
    with pytest.raises(ConfigError) as ei:
        load_policy(path)
    assert [(p.line, p.column) for p in ei.value.problems] == [(2, 9), (3, 3), (4, 1)]


def test_ranks_must_exist_in_topology(write):
    fabric = load_topology(MAIN_TOPOLOGY)
    path = write(
        GOOD_HEAD + "collectives:\n  - name: a\n    algorithm: ring\n    ranks: [h1, h99, h2]\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_policy(path, fabric)
    assert str(ei.value) == (
        f"{path}:7:17: collectives[0].ranks[1]: no host 'h99' in topology "
        f"'leafspine-2x4x2' ({MAIN_TOPOLOGY})"
    )


def test_same_flow_in_two_collectives_needs_a_distinguishing_match(write):
    fabric = load_topology(MAIN_TOPOLOGY)
    body = (
        "collectives:\n"
        "  - {name: a, algorithm: ring, ranks: [h1, h3]}\n"
        "  - {name: b, algorithm: ring, ranks: [h1, h3]}\n"
    )
    with pytest.raises(ConfigError, match="already declared by collective 'a'"):
        load_policy(write(GOOD_HEAD + body), fabric)
    ok = body.replace("ranks: [h1, h3]}\n", "ranks: [h1, h3], dscp: 26}\n", 1)
    load_policy(write(GOOD_HEAD + ok), fabric)


def test_duplicate_collective_names(write):
    body = (
        "collectives:\n"
        "  - {name: a, algorithm: ring, ranks: [h1, h3]}\n"
        "  - {name: a, algorithm: ring, ranks: [h2, h4]}\n"
    )
    with pytest.raises(ConfigError, match="repeated: a"):
        load_policy(write(GOOD_HEAD + body))


def test_hash_seeds_per_tier(write):
    path = write(GOOD_HEAD + "  ecmp:\n    hash_fields: [ipv4_src, l4_src]\n"
                 "    hash_seeds: {leaf: 1, spine: 7}\n")
    ecmp = load_policy(path, load_topology(MAIN_TOPOLOGY)).routing.ecmp
    assert ecmp.hash_fields == ("ipv4_src", "l4_src")
    assert ecmp.hash_seeds.given() == {"leaf": 1, "spine": 7}
    assert ecmp.hash_seeds.seed_of("spine") == 7 and ecmp.hash_seeds.seed_of("core") is None
    assert load_policy(write(GOOD_HEAD)).routing.ecmp.hash_seeds.given() == {}


@pytest.mark.parametrize(
    ("seeds", "expected"),
    [
        ("{leaf: 1, spnie: 7}", "5:27: routing.ecmp.hash_seeds.spnie: unknown key"),
        ("{leaf: -1}", "5:24: routing.ecmp.hash_seeds.leaf: Input should be greater than or equal to 0"),
        ("{leaf: 4294967296}", "5:24: routing.ecmp.hash_seeds.leaf: Input should be less than or equal to 4294967295"),
        ("{leaf: '7'}", "5:24: routing.ecmp.hash_seeds.leaf: Input should be a valid integer"),
        ("[1, 2]", "5:17: routing.ecmp.hash_seeds:"),
    ],
)
def test_bad_hash_seeds_are_located(write, seeds, expected):
    path = write(GOOD_HEAD + f"  ecmp:\n    hash_seeds: {seeds}\n")
    with pytest.raises(ConfigError) as ei:
        load_policy(path)
    assert f"{path}:{expected}" in str(ei.value), str(ei.value)


def test_hash_seed_for_a_tier_the_topology_lacks(write):
    path = write(GOOD_HEAD + "  ecmp:\n    hash_seeds: {leaf: 1, core: 3}\n")
    load_policy(path)  # without a topology the roles cannot be checked
    with pytest.raises(ConfigError) as ei:
        load_policy(path, load_topology(MAIN_TOPOLOGY))
    assert str(ei.value) == (
        f"{path}:5:27: routing.ecmp.hash_seeds.core: topology 'leafspine-2x4x2' has no core "
        "switches (its roles: leaf, spine)"
    )
