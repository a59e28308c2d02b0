"""Layer 4: what chapter notebooks call, so that a notebook keeps only what a learner should read or
write. `context` checks the run parameters and names the records; `evidence` shows the figures the
original course reported beside the learner's own run."""
