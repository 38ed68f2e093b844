"""Generated from ``controller/northbound/aifabric.proto`` (do not edit; see ``generate.py``)."""
