"""Layer 1 of the course tools: run parameters, paths, write-once records, environment facts and
preflight reports. Standard library only (torch is looked up, never required)."""
