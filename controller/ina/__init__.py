"""In-network aggregation (SwitchML-style) for BMv2: worker library, packet format, quantisation,
a reference model of the switch program and the controller's job set-up.

Layers inside this package (pure first, I/O last):

* :mod:`~controller.ina.program` — the P4 program's constants and control-plane names (data).
* :mod:`~controller.ina.quant` — float32 ↔ int32 block fixed point with per-block exponents.
* :mod:`~controller.ina.wire` — the aggregation header, struct codec (fast path).
* :mod:`~controller.ina.scapy_layer` — the same format as a scapy layer (tests, dissection).
* :mod:`~controller.ina.chunks` — packetisation, padding, reassembly.
* :mod:`~controller.ina.protocol` — the worker's sans-I/O state machine (slots, window,
  retransmission on timeout, reassembly), clock injected.
* :mod:`~controller.ina.refswitch` — pure-Python model of ``p4/aggregation/aggregation.p4``.
* :mod:`~controller.ina.sim` — workers and the reference switch on a virtual clock with loss.
* :mod:`~controller.ina.worker` — ``allreduce(array)`` over UDP sockets (the I/O edge).
* :mod:`~controller.ina.job` — job specs, slot-region allocation, the P4 entities of a job (pure).
* :mod:`~controller.ina.p4rt` — job set-up / tear-down on a switch over P4Runtime (finsy).

Reference: A. Sapio et al., "Scaling Distributed Machine Learning with In-Network Aggregation",
NSDI 2021 (SwitchML): Algorithm 1 (pool-based streaming aggregation), Algorithm 2 (packet loss
recovery with shadow copies), and the block floating point scheme with per-packet exponents.
"""
