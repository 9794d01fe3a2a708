"""The exporters Prometheus scrapes: DCGM GPU series and vLLM serving series."""
