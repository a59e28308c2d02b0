"""The benchmark's arithmetic and report (the measurements themselves are not timed tests)."""

from tools.course.runs.bench import _DURATION, format_bench


def test_durations_are_summed_per_test_file():
    lines = ["12.50s call     tests/test_a.py::test_x[1]", "0.50s setup    tests/test_a.py::test_y@group",
             "3.00s teardown tests/test_b.py::test_z", "(12 durations < 0.005s hidden.)"]
    parsed = [(m.group(2), float(m.group(1))) for m in map(_DURATION.match, lines) if m]
    assert parsed == [("tests/test_a.py", 12.5), ("tests/test_a.py", 0.5), ("tests/test_b.py", 3.0)]


def test_the_table_shows_ratios_and_the_sandbox_cost():
    chapter = {"chapter": "33", "dry_run_s": 3.1, "cpu_smoke_s": 4.2, "verify_s": 15.0,
               "verify_nbgrader_per_submission_s": 2.2, "oracle_per_planted_s": 0.05,
               "grading": {"plain_per_submission_s": 2.0, "jobs1_per_submission_s": 2.3,
                           "jobs2_per_submission_s": 1.1, "jobs2_over_plain": 0.55,
                           "sandbox_overhead_per_submission_s": 0.3}}
    suite = {"wall_s": 300.0, "workers": 2, "summary": "355 passed in 300s",
             "seconds_per_file": {"tests/test_a.py": 100.0}}
    text = format_bench([chapter, {**chapter, "chapter": "13", "grading": None}], suite)
    header, _, first, second, *rest = text.splitlines()
    assert "jobs2/plain" in header and "sandbox s/sub" in header
    assert first.split()[-2:] == ["0.55", "0.3"] and second.split()[-1] == "-"
    assert "300 s wall with 2 workers" in text and "tests/test_a.py" in text


def test_the_class_grading_lines_show_the_commands_the_goals_and_the_load():
    grading = {"copies": 6, "load_before": [0.5, 0.7, 0.9], "load_after": [1.1, 0.8, 0.9], "plain_autograde_s": 30.0,
               "plain_feedback_s": 8.0, "plain_s": 38.0, "jobs1_s": 40.0, "jobs2_s": 21.0, "jobs1_over_plain": 1.05,
               "jobs2_over_plain": 0.55, "boundary_cost_per_submission_s": 0.4,
               "submission_median_with_boundary_s": 6.1, "submission_median_without_boundary_s": 5.7,
               "cpu_hog": {"beside_over_alone": 1.2, "alone_s": [5.0, 5.2], "beside_hog_s": [6.0, 6.3],
                           "load_before": [0.5, 0.5, 0.5], "load_after": [1.0, 1.0, 1.0]}}
    text = format_bench([{"chapter": "PT-RL-SYSTEM", "grading": grading}], None)
    assert "plain nbgrader: autograde 30.0 s + generate_feedback 8.0 s = 38.0 s" in text
    assert "--jobs 2: 21.0 s (0.55x plain; goal <= 0.6x)" in text and "boundary per submission: 0.4 s" in text
    assert "beside a CPU hog: 1.2x its time alone (goal <= 1.5x" in text and "load average [0.5, 0.7, 0.9]" in text
