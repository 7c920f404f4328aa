"""GPU probe (NVML), its Prometheus export and the wait-for-gpu-memory action.

Only the standard library and pynvml are needed for probe.py and wait.py; export.py adds
prometheus-client."""
