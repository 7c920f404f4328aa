"""Capacity planning: will a model fit a GPU under vLLM (inference.py), and how many servers and
workers the document volume needs each quarter (forecast.py). Data with sources: *.yaml here."""

from runbooks.capacity.catalog import CatalogError, find_gpu, find_model, gpus, models
from runbooks.capacity.inference import (
    FitReport,
    Overrides,
    fits,
    kv_bytes_per_token,
    kv_capacity_tokens,
    plan,
)
from runbooks.capacity.spec_check import check_server_fits

__all__ = [
    "CatalogError", "FitReport", "Overrides", "check_server_fits", "find_gpu", "find_model",
    "fits", "gpus", "kv_bytes_per_token", "kv_capacity_tokens", "models", "plan",
]
