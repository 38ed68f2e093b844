"""Open vSwitch drivers that talk to OVSDB and the kernel (not OpenFlow)."""
