"""nbgrader configuration for the course. Run nbgrader's commands from this folder (exercises/).

    nbgrader generate_assignment --all --force   # source/ -> release/  (or: make exercises)
    nbgrader autograde "*"                       # submitted/ -> autograded/, scores into gradebook.db
    nbgrader generate_feedback "*"               # autograded/ -> feedback/ (HTML, hidden tests removed)
    nbgrader export                              # grades.csv
"""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)

here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = here
c.CourseDirectory.course_id = "inside-the-transformer-block"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(here, "gradebook.db")

# Per-cell time limit when autograding. A student's function runs in the checkers' own forked processes
# with shorter limits (5 s in a visible self-check, 10 s in a hidden test); this bounds everything else,
# e.g. a loop at the top level of an answer cell, which is interrupted here while later cells still run.
c.Execute.timeout = 15
# After a cell's reply, how long to wait for its last output messages. nbgrader treats a wait that
# runs out as a dead kernel and fails the whole assignment for that student; nbclient's default, 4 s,
# runs out now and then on a busy machine although the kernel is fine (jupyter/nbgrader#1230).
c.Execute.iopub_timeout = 30

# Feedback must not show the hidden tests.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "nbgrader.preprocessors.ClearHiddenTests",
]

# What replaces a solution in the released notebook.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
