"""Flow-level evaluation of TE strategies (pure): max-min fair rates, collective completion times,
ECMP / static / aifabric pinning compared, and the scenario files that drive it."""
