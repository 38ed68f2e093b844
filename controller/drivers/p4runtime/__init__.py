"""The P4Runtime southbound: aifabric's plan on switches running p4/fabric/fabric.p4.

Layers, as in the OpenFlow driver: :mod:`.pipeline` (the control-plane names of the P4 program,
declared as data), :mod:`.entities` (backend-neutral P4 entity values), :mod:`.encode` (plan →
entities, pure), :mod:`.reconcile` (intended vs. read-back → ordered write phases, pure),
:mod:`.model` (a Python model of the program's forwarding and ECMP hash, for tests),
:mod:`.codec` (entities ↔ finsy objects, names checked against the committed P4Info by finsy)
and :mod:`.client` (the only module that talks to a switch, over finsy/gRPC).
"""
