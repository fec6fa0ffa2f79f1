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

# Per-cell time limit when autograding. A student's infinite loop is interrupted after this many
# seconds; the following cells still run, so it costs only that task's points.
c.Execute.timeout = 60

# Feedback must not show the hidden tests.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "nbgrader.preprocessors.ClearHiddenTests",
]

# What replaces a solution in the released notebook.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
