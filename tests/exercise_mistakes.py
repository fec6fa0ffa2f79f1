"""(Transitional: assignments move to tests/mistakes/exNN.py as their checkers move to the Task core.)

Known wrong answers for every graded task, used by tests/test_exercises.py.

For each assignment, each answer cell's ``grade_id`` maps to replacement code with one typical
mistake. Autograding a copy of the source notebook with that one cell replaced must cost exactly the
points of the matching test cell. A new assignment must add its entries here (a test checks).
"""

MISTAKES: dict[str, dict[str, str]] = {
}
