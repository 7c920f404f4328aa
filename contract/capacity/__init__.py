"""Will a model fit a GPU under vLLM: the catalog of GPUs and models (data with sources in the
YAML files here) and the memory math the spec's rules and `runbook capacity-plan` share."""

from contract.capacity.catalog import CatalogError, find_gpu, find_model, gpus, models
from contract.capacity.inference import (
    FitReport,
    Overrides,
    fits,
    kv_bytes_per_token,
    kv_capacity_tokens,
    plan,
)
from contract.capacity.spec_check import check_server_fits

__all__ = [
    "CatalogError", "FitReport", "Overrides", "check_server_fits", "find_gpu", "find_model",
    "fits", "gpus", "kv_bytes_per_token", "kv_capacity_tokens", "models", "plan",
]
