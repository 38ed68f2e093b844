"""No unauthenticated channel: certificates, TLS for every channel, bearer tokens per role.

* :mod:`~controller.security.certs`: the development CA and certificates (``aifabric certs init``);
* :mod:`~controller.security.transport`: TLS files, and the rule "plain text only with
  ``insecure=True``, said loudly in the log" (no gRPC import: drivers may use it);
* :mod:`~controller.security.grpc_tls`: gRPC server and channel credentials (TLS, mTLS);
* :mod:`~controller.security.tokens`: bearer tokens per role and the northbound method table;
* :mod:`~controller.security.interceptor`: the token check for ``grpc`` and ``grpc.aio`` servers;
* :mod:`~controller.security.southbound`: OpenFlow (os-ken, Open vSwitch) and P4Runtime (finsy,
  BMv2) TLS settings as plain config values;
* :mod:`~controller.security.metrics_http`: the Prometheus endpoint over HTTPS with basic auth.

Modules are imported by name (``from controller.security.tokens import ...``): importing this
package pulls in neither gRPC nor prometheus_client.
"""
