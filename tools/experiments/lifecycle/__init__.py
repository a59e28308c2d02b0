"""Project 86 (lifecycle and recovery): policy freshness, end-to-end hashes, the staged publish protocol
with its recovery, injected failures, and the handoff state."""
