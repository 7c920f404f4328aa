"""Inference-server simulator: a vLLM-compatible digital twin that speaks MinerU's VLM protocol."""
