"""QoS: pure derivations (``formulas``), checks (``checks``) and per-port compilation
(``compile``) of the policy's ``traffic_classes``/``pfc``/``ecn``/``buffers``/``shaping``."""
