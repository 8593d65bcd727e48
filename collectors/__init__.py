"""What we record while a workload runs: background samplers, the run directory and the
Prometheus exporter."""
