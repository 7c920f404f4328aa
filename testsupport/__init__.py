"""Test support, not shipped in the wheel: free ports, processes in their own group with health
polling and a guaranteed kill, and harnesses that run real services on loopback. Used by
tests/ and benchmarks/ alike."""
