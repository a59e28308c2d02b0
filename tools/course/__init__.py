"""Layer 4: the course's own machinery behind `python -m tools.course`, in four subsystems.

    cells, nbgrader_cli  the shared base: finding cells by tag, reading/writing notebooks, nbgrader's CLI
    authoring            the chapter template rules (check) and the chapter scaffold (new-chapter)
    grader               chapter -> nbgrader source (build), grader-strength proofs (verify, oracle),
                         differential hidden tests
    classroom            grading a class: batch, worker slots, sandboxed kernels, feedback, class report
    runs                 papermill batch runs, the registry and profiles, the README chapter table, bench

Sub-layers, from the bottom: the base < authoring, grader < classroom < runs < `__main__`
(`tests/repo/test_layers.py` checks the order).
"""
