"""Hostile inputs get located errors, never tracebacks or runaway memory."""

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.errors import ConfigError
from controller.model import load_topology
from controller.qos.validate import load_valid_policy as load_policy
from controller.yamlsrc import MAX_NODES
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

LS = ("name: x\nkind: leaf-spine\nspines: 2\nleaves: 2\nhosts_per_leaf: {hpl}\n"
      "links:\n  host: {{rate: {rate}, latency: 1us}}\n  fabric: {{rate: 1Gbps, latency: 1us}}\n")


def test_binary_file_is_a_config_error(tmp_path):
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\x00\x95\xff\xfe garbage")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_topology(p)


@pytest.mark.parametrize("text,where,char", [
    ("version: 1\n# a \x00 in a comment\n", "2:5", "#x0000"),
    ('version: 1\nrouting: {mode: "pin\x07ned"}\n', "2:21", "#x0007"),
])
def test_control_character_is_a_located_error(tmp_path, text, where, char):
    """UTF-8 but not printable (YAML 1.2 §5.1): a located error, exit 2, no traceback."""
    p = tmp_path / "ctl.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=f"ctl.yaml:{where}: invalid YAML: unacceptable "
                                          f"character {char}"):
        load_policy(p)
    r = CliRunner().invoke(main, ["policy", "check", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_directory_is_named_as_such(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_policy(tmp_path)


def test_alias_bomb_is_refused(tmp_path):
    lines = ["a0: [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines[0] = "a0: &a0 [x, x, x, x, x, x, x, x, x]"
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES} nodes"):
        load_policy(p)


@pytest.mark.parametrize("rate", ["1e400Mbps", "1e999Gbps"])
def test_infinite_quantities_are_errors(write, rate):
    with pytest.raises(ConfigError, match="links.host.rate: .* is too large"):
        load_topology(write(LS.format(hpl=1, rate=rate)))


def test_booleans_and_strings_are_not_numbers(write):
    with pytest.raises(ConfigError, match="hosts_per_leaf"):
        load_topology(write(LS.format(hpl="true", rate="1Gbps")))
    pol = write("routing: {mode: pinned}\ncollectives:\n"
                "  - {name: a, algorithm: ring, ranks: [h1, h2], dscp: '26'}\n", "p.yaml")
    with pytest.raises(ConfigError, match=r"3:55: collectives\[0\].dscp"):
        load_policy(pol)


def test_fat_tree_larger_than_specified_is_refused(write):
    text = ("name: x\nkind: fat-tree\nk: 64\nlinks:\n  host: {rate: 1Gbps, latency: 1us}\n"
            "  fabric: {rate: 1Gbps, latency: 1us}\n")
    with pytest.raises(ConfigError, match="3:4: k: "):
        load_topology(write(text))


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "127.0.0.1:0", "nohost", ":6653"])
def test_bad_listen_is_a_usage_error(listen):
    res = CliRunner().invoke(main, ["controller", "-t", str(MAIN_TOPOLOGY), "-p",
                                    str(PINNED_POLICY), "--listen", listen])
    assert res.exit_code == 2 and "--listen" in res.stderr


def test_lab_refuses_fabrics_too_big_for_one_machine(tmp_path):
    from mininet_labs.lab.runner import load as load_experiment

    topo = tmp_path / "big.yaml"
    topo.write_text("name: big\nkind: fat-tree\nk: 8\nlinks:\n  host: {rate: 1Gbps, latency: 1us}\n"
                    "  fabric: {rate: 1Gbps, latency: 1us}\n")
    pol = tmp_path / "p.yaml"
    pol.write_text("routing: {mode: ecmp}\ncollectives:\n  - {name: a, algorithm: ring, ranks: [h1, h2]}\n")
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: e\ntopology: {topo}\npolicy: {pol}\nmodes: [ecmp]\nseeds: [1]\n"
                   "workload: {kind: ring-allreduce, bytes: 1MB}\n")
    with pytest.raises(ConfigError, match="2:11: topology: big has 80 switches"):
        load_experiment(exp)


def test_lab_lock_refuses_a_second_holder(tmp_path, monkeypatch):
    from mininet_labs.lab import net

    monkeypatch.setattr(net, "LOCK_FILE", tmp_path / "lock")
    with net.lab_lock():
        with pytest.raises(RuntimeError, match="another aifabric lab is running"):
            with net.lab_lock():
                pass
    with net.lab_lock():  # released
        pass


def test_integer_key_is_located_at_its_line(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("version: 1\nrouting:\n  mode: ecmp\n  7: x\n")
    with pytest.raises(ConfigError) as ei:
        load_policy(p)
    assert [str(x) for x in ei.value.problems] == [f"{p}:4:6: routing.7: Keys should be strings"]


@pytest.mark.parametrize("text, where", [
    ("[" * 5000 + "]" * 5000, "1:65"),                  # flow: a RecursionError before
    ("a:\n" + "- " * 100 + "x\n", "2:129"),             # compact block sequences
    ("a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 80)),
     r"1:10: nested deeper than 64 levels once its aliases are expanded"),
])
def test_nesting_beyond_max_depth_is_a_located_limit_error(tmp_path, text, where):
    """Issue 23: the tokenizer refuses a level beyond MAX_DEPTH as it opens (aliases that
    nest deeper are refused when expanded); the CLI exits 2 without a traceback."""
    from controller.errors import DocumentLimitError
    from controller.yamlsrc import MAX_DEPTH

    p = tmp_path / "deep.yaml"
    p.write_text(text)
    with pytest.raises(DocumentLimitError, match=f"deep.yaml:{where}") as ei:
        load_policy(p)
    assert ei.value.limit == "max_depth" and f"limit max_depth {MAX_DEPTH}" in str(ei.value)
    r = CliRunner().invoke(main, ["policy", "check", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output
