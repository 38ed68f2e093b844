"""The northbound API: a gRPC service for training platforms (``aifabric.proto``), its server,
and a small client helper. The request model (:mod:`.model`) has no grpc import; the server and
client import grpc."""
