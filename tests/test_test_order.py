"""The order in which conftest.py runs the tests that wait for background jobs: each job's tests as
soon as it has finished, between ordinary tests (``_next_item``, used by its ``pytest_runtestloop``)."""

from __future__ import annotations

import pytest

import conftest


class FakeJob:
    """Stands for a background job's process: ``poll()`` is None until it is done."""

    def __init__(self):
        self.done = False

    def poll(self):
        return 0 if self.done else None


@pytest.fixture
def jobs(monkeypatch):
    running = {"colab": FakeJob(), "book-build": FakeJob()}
    monkeypatch.setattr(conftest, "_jobs", {name: conftest._Job(job, None) for name, job in running.items()})
    monkeypatch.setattr(conftest, "_begun", set())
    monkeypatch.setattr(conftest, "_after_grading", [])
    return running


def take(ordinary, waiting, n):
    return [conftest._next_item(ordinary, waiting, wait=False) for _ in range(n)]


def test_a_finished_jobs_tests_come_before_the_ordinary_ones_and_keep_their_order(jobs):
    ordinary, waiting = ["o1", "o2", "o3"], {"colab": ["c1", "c2"], "book-build": ["b1", "b2"]}
    assert take(ordinary, waiting, 1) == ["o1"]
    jobs["book-build"].done = True
    assert take(ordinary, waiting, 2) == ["b1", "b2"]
    assert take(ordinary, waiting, 1) == ["o2"]
    jobs["colab"].done = True
    assert take(ordinary, waiting, 4) == ["c1", "c2", "o3", None]


def test_a_job_whose_tests_have_begun_goes_on_before_another_that_finished(jobs):
    ordinary, waiting = ["o1"], {"colab": ["c1", "c2"], "book-build": ["b1", "b2"]}
    jobs["book-build"].done = True
    assert take(ordinary, waiting, 1) == ["b1"]
    jobs["colab"].done = True  # listed first, but the book's tests have begun
    assert take(ordinary, waiting, 4) == ["b2", "c1", "c2", "o1"]


def test_with_only_running_jobs_left_the_choice_says_wait_or_waits(jobs, monkeypatch):
    ordinary, waiting = [], {"colab": ["c1"], "book-build": ["b1"]}
    assert conftest._next_item(ordinary, waiting, wait=False) is conftest.WAIT

    def sleep(seconds):  # the colab job finishes while the loop waits
        jobs["colab"].done = True

    monkeypatch.setattr(conftest.time, "sleep", sleep)
    assert conftest._next_item(ordinary, waiting, wait=True) == "c1"


def test_a_job_not_yet_started_is_waited_for_until_every_start_is_done(jobs, monkeypatch):
    ordinary, waiting = ["o1"], {"replays": ["r1"]}
    monkeypatch.setattr(conftest, "_after_grading", [lambda: None])  # the starts still to come
    assert take(ordinary, waiting, 2) == ["o1", conftest.WAIT]
    monkeypatch.setattr(conftest, "_after_grading", [])  # all started, and replays was not
    assert take(ordinary, waiting, 2) == ["r1", None]
