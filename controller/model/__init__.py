"""The fabric model: topology files → immutable :class:`Fabric` and its networkx graph."""

from controller.model.topology import (
    Fabric,
    Host,
    Link,
    Switch,
    build_fat_tree,
    build_leaf_spine,
    load_topology,
)

__all__ = [
    "Fabric",
    "Host",
    "Link",
    "Switch",
    "build_fat_tree",
    "build_leaf_spine",
    "load_topology",
]
