"""Building and proving the graders: chapter notebook + hidden tests -> nbgrader source (`build`), the
grader-strength matrix (`verify`, through nbgrader and the forked `oracle`), differential hidden tests."""
