"""Layer 2: fixed inputs built in code (no download): `arithmetic` holds the seeded arithmetic
task pool that the shared verl experiment and the SFT stages train and score on."""
