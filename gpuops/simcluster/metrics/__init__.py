"""The exporters Prometheus scrapes (DCGM GPU series, vLLM serving series) and the vLLM
servers the serving replicas run (their HTTP API through the pod proxy)."""
