"""The course command line (`python -m tools.course`) and the library behind it.

Modules: catalog (chapters), cells (finding cells by tag), notebook_check (template rules),
grading_build (chapter -> nbgrader source), grading_verify (prove the graders' strength),
runner (papermill batch runs).
"""
