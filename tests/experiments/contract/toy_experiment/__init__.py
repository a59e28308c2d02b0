"""A toy experiment that exists only for the tests of the experiment contract. It registers itself by
declaring `EXPERIMENTS` in its own `experiment.py`; nothing else in the repository names it (the
tests make it visible through COURSE_EXPERIMENT_PACKAGES)."""
