"""High availability on etcd: the shared intent store, replicas and per-switch mastership held
with etcd leases, and the fencing token the switches enforce.

One concept per module:

* :mod:`~controller.cluster.etcd`: the ``etcd://`` URL and one client for every member;
* :mod:`~controller.cluster.keys`: where things live in etcd;
* :mod:`~controller.cluster.store`: the applied policy and registered collectives (CAS commits);
* :mod:`~controller.cluster.balance`: the balanced, stable assignment of switches (pure);
* :mod:`~controller.cluster.lease`: a replica's lease and the timing argument for stepping down;
* :mod:`~controller.cluster.fencing`: the mastership term → P4Runtime election_id, OpenFlow
  generation_id;
* :mod:`~controller.cluster.mastership`: claims, releases and role events per switch.
"""

from controller.cluster.balance import balanced_assignment
from controller.cluster.etcd import EtcdClient, EtcdSettings, EtcdTLS, parse_cluster_url
from controller.cluster.fencing import MastershipTerm, backup_election_id
from controller.cluster.keys import ClusterKeys
from controller.cluster.lease import LeaseSettings
from controller.cluster.mastership import MastershipEvent, MastershipService, Role
from controller.cluster.store import (
    CollectiveRecord,
    IntentChange,
    IntentSnapshot,
    IntentStore,
    PolicyRecord,
    StaleGeneration,
    StoreUnavailable,
    UnknownCollective,
)

__all__ = [
    "ClusterKeys", "CollectiveRecord", "EtcdClient", "EtcdSettings", "EtcdTLS", "IntentChange",
    "IntentSnapshot", "IntentStore", "LeaseSettings", "MastershipEvent", "MastershipService",
    "MastershipTerm", "PolicyRecord", "Role", "StaleGeneration", "StoreUnavailable",
    "UnknownCollective", "backup_election_id", "balanced_assignment", "parse_cluster_url",
]
