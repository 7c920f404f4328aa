"""Capacity planning for on-call: how many servers and workers the document volume needs each
quarter (forecast.py) and which models fit which GPUs (matrix.py). The fit math itself is part
of the contract layer (contract/capacity), because the spec's rules use it too."""
