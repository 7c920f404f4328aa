"""The MinerU worker: a stateless CPU worker that takes PDF jobs from a Redis stream, runs MinerU
in-process with the VLM HTTP-client backend against the shared inference server, and writes
markdown, a content list and a metadata record per job. See docs/worker.md."""
