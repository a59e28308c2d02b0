"""Layer 4: the course's own machinery behind `python -m tools.course`, in four subsystems.

    layout, cells,       the shared base: every path under grading/ and build/ (`CourseLayout`,
    nbgrader_cli         `NbgraderCourse`), finding cells by tag and reading/writing notebooks,
                         nbgrader's command line and what the course reads back from nbgrader
    scratch              temporary folders that name their owner; a dead owner's is removed by the next
    ray_cluster          connecting to a Ray cluster (both Ray executors: runs and classroom)
    authoring            the chapter template rules (check) and the chapter scaffold (new-chapter)
    grader               chapter -> nbgrader source (build), grader-strength proofs (verify, oracle),
                         differential hidden tests
    classroom            grading a class: batch, worker slots, sandboxed kernels, feedback, class report
    runs                 papermill batch runs, the registry and profiles, the README chapter table, bench

Sub-layers, from the bottom: layout, cells, scratch < nbgrader_cli, ray_cluster < authoring, grader < classroom < runs <
`__main__` (`tests/repo/test_layers.py` checks the order and that no import cycle exists).
"""
