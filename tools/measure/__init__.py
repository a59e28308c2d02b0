"""Layer 2: measuring what a stage used. `sampler` samples device and host memory every 0.25 s
(NVML, then torch, else null); `training` times training steps, reads peak memory and turns an
out-of-memory error into a recorded status; `timing` and `memory_phases` hold chapter 73's measuring
discipline (synchronised, warmed-up, repeated timing; peak memory reset per phase)."""
