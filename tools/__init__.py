"""Shared code of the post-training systems course: runtime, models, grading and batch runs."""
