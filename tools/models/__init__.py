"""Layer 2: the course's models. `architectures` (what the tiny and random-init models are),
`cache` (finding a model locally, download hints), `builders` (building folders offline),
`loading` (resolve, load, identify)."""
