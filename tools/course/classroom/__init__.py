"""Grading a class: the batch (`batch`), worker slots (`slot`, `worker`), the sandbox and its launcher,
kernels forked from a zygote (`zygote`), leak-free feedback, the class report and nbgrader's instructor
commands (`instructor`)."""
