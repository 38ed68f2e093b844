"""Drivers: the only code that talks to switches. ``openflow`` (os-ken, OpenFlow 1.3)."""
