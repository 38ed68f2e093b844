# aifabric: two commands do all set-up on a fresh Debian 12 machine (as root):
#   make demo   installs what is missing, then runs the main experiment (ECMP vs pinned)
#   make test   installs what is missing, then runs every test (Mininet ones too, as root)
# Every target is idempotent.

SHELL        := /bin/bash
PYTHON       ?= python3
VENV         ?= .venv
PY           := $(VENV)/bin/python
STAMP        := $(VENV)/.aifabric-installed
DEBS         := mininet openvswitch-switch iperf3 ethtool iputils-ping iproute2 python3-venv etcd-server \
                ns3 libns3-dev g++ make prometheus chromium
EXPERIMENT   ?= mininet_labs/experiments/ecmp_vs_pinned.yaml
OUT          ?= results/ecmp_vs_pinned
PYTEST_ARGS  ?=

.PHONY: all setup debs venv ovs ns3 demo test lint typecheck bench dist docs clean

all: test

setup: debs venv ovs ns3

# The ns-3 scenario programs and PFC module of the QoS validation (validation/ns3, against
# Debian's ns-3 3.37); tests/test_qos_ns3.py runs short versions, bench/qos_validate.py the table.
ns3: debs
	@nice $(MAKE) -s -C validation/ns3

# Debian packages: install only the missing ones (apt-get update only when something is missing).
debs:
	@missing=""; for p in $(DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "Debian packages: all present"; fi

# A virtual environment that sees Debian's Mininet (pure Python, linked into site-packages).
# torch (the labs' torch workloads, extra .[torch]) is pinned: on these machines 2.13.0 is a CPU
# wheel on local disk, while a plain `torch` would pull a multi-GB CUDA build.
TORCH        ?= torch==2.13.0
venv: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q '$(TORCH)'
	@$(PY) -m pip install -q -e '.[dev,torch]'
	@site=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  ln -sfn /usr/lib/python3/dist-packages/mininet "$$site/mininet"
	@$(PY) -c 'import mininet.net, os_ken, torch, controller; print("venv ready:", __import__("sys").version.split()[0], "torch", torch.__version__)'
	@touch $(STAMP)

# Open vSwitch with the userspace datapath needs no kernel module; start it when it is not running.
# Its datapath sends every port's packets through ONE AF_PACKET socket, created with the default
# send buffer (net.core.wmem_default, 208 KiB: ~15 jumbo frames). Frames queued in the ports'
# HTB classes count against that buffer, so a busy port made sends on every other port fail
# ("Resource temporarily unavailable"): 5-13 % of a strict-priority probe lost in the labs.
# Raise the default before ovs-vswitchd opens that socket (restart it when it runs with a small
# one and carries no bridge).
OVS_SEND_BUFFER_BYTES ?= 16777216
OVS_CTL := /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-monitor
ovs:
	@cur=$$(cat /proc/sys/net/core/wmem_default); if [ "$$cur" -lt $(OVS_SEND_BUFFER_BYTES) ]; then \
	  echo $(OVS_SEND_BUFFER_BYTES) > /proc/sys/net/core/wmem_default && \
	  echo "net.core.wmem_default: $$cur -> $(OVS_SEND_BUFFER_BYTES) bytes (Open vSwitch's send socket)"; fi
	@# ovsdb-server answering is not enough: a killed ovs-vswitchd leaves it running
	@if ovs-vsctl --timeout=3 show >/dev/null 2>&1 && pidof ovs-vswitchd >/dev/null; then \
	  tb=$$(ss -0 -m -p 2>/dev/null | grep '"ovs-vswitchd"' | grep -o 'tb[0-9]*' | tr -d tb | sort -n | head -1); \
	  if [ -n "$$tb" ] && [ "$$tb" -lt $(OVS_SEND_BUFFER_BYTES) ]; then \
	    if [ -z "$$(ovs-vsctl list-br)" ]; then \
	      echo "restarting ovs-vswitchd: its send socket has a $$tb-byte buffer"; \
	      ovs-appctl -t ovs-vswitchd exit >/dev/null 2>&1 || true; sleep 1; $(OVS_CTL) >/dev/null 2>&1 || true; \
	    else echo "WARNING: ovs-vswitchd's send socket has a $$tb-byte buffer and bridges exist:" \
	      "labs will lose packets; restart ovs-vswitchd when no lab runs"; fi; fi; \
	  ovs-vsctl --timeout=10 show >/dev/null && echo "Open vSwitch: running"; \
	else echo "starting Open vSwitch"; \
	  $(OVS_CTL) >/dev/null 2>&1 || true; \
	  ovs-vsctl --timeout=10 show >/dev/null && echo "Open vSwitch: running"; fi

demo: setup
	$(VENV)/bin/aifabric lab run $(EXPERIMENT) --out $(OUT)

test: setup lint typecheck
	$(PY) -m pytest -q -rs $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check controller mininet_labs tests bench
	$(VENV)/bin/lint-imports

# The type checker (config in pyproject.toml, [tool.mypy]); part of `make test`.
typecheck: venv
	$(VENV)/bin/mypy

bench: venv
	$(PY) bench/te_plan.py

# The sdist and the wheel (P4 outputs, experiments, topologies and policies inside; version from
# pyproject.toml). tests/test_install.py builds them the same way and runs the installed program.
dist: venv
	$(PY) -m build --no-isolation --outdir dist .

# The documentation site (mkdocs.yml; reference pages generated from the code at build time)
# into build/site; `make test` builds it --strict too (tests/test_docs.py). prometheus (Debian)
# brings promtool, which tests/test_prometheus_rules.py runs on deploy/prometheus/. chromium
# (Debian) is the headless browser tests/test_view_browser.py loads the live view in.
docs: venv
	PYTHONPATH=$(CURDIR) $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) results .pytest_cache *.egg-info dist validation/ns3/build
