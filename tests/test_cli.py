"""The commands `python -m course_lib.train` and `python -m course_lib.sample`: they run as documented,
write the checkpoint and the JSON log, and end bad input with a one-line error and a non-zero status."""

import json
import subprocess
import sys

import pytest

from course_lib import sample as sample_cli
from course_lib import train as train_cli
from course_lib.training import load_checkpoint


def run(*args, module="course_lib.train"):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    result = run("--preset", "tiny", "--out", str(out), "--no-progress", "--threads", "1")
    assert result.returncode == 0, result.stderr
    return out, result


def test_train_writes_checkpoint_and_log(trained):
    out, result = trained
    log = json.loads((out / "log.json").read_text())
    assert log["preset"] == "tiny" and log["parameters"] > 0
    steps = [e["step"] for e in log["evaluations"]]
    assert steps == [10, 20]
    for e in log["evaluations"]:
        assert set(e) >= {"step", "train_loss", "val_loss", "tokens_per_second", "elapsed_seconds"}
        assert 0 < e["val_loss"] < 5 and e["tokens_per_second"] > 0
    assert load_checkpoint(out / "checkpoint.pt")["step"] == 20
    assert "validation loss" in result.stdout


def test_sample_prints_the_prompt_and_new_text(trained):
    out, _ = trained
    result = run(str(out), "--prompt", "ROMEO:", "--max-new-tokens", "40", "--seed", "1", "--top-k", "10",
                 module="course_lib.sample")
    assert result.returncode == 0, result.stderr
    text = result.stdout[:-1]  # print's newline
    assert text.startswith("ROMEO:") and len(text) == 6 + 40


def test_sample_is_reproducible_from_the_seed(trained, capsys):
    out, _ = trained
    texts = []
    for seed in ("3", "3", "4"):
        assert sample_cli.main([str(out / "checkpoint.pt"), "--seed", seed, "--temperature", "1.0",
                                "--top-p", "0.9", "--max-new-tokens", "50"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] != texts[2]


def test_unknown_preset_and_bad_prompt_end_in_one_line(trained):
    assert_one_line_error(run("--preset", "nope"), "unknown preset 'nope'", "shakespeare-cpu")
    out, _ = trained
    assert_one_line_error(run(str(out), "--prompt", "Ça va?#", module="course_lib.sample"),
                          "--prompt", "'#'", "'Ç'")


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as info:
        train_cli.main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--preset", "--out", "--steps", "--seed", "--grad-accum", "--precision", "--target-loss",
                   "--ema", "--compile", "--device", "--threads",
                   "--resume",
                   "--no-progress", "shakespeare-cpu", "shakespeare-gpu"):
        assert option in text
    with pytest.raises(SystemExit):
        sample_cli.main(["--help"])
    text = capsys.readouterr().out
    for option in ("CHECKPOINT", "--prompt", "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed"):
        assert option in text


def one_line_error(capsys, main, argv, *fragments):
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "error:" in err[0], err
    for fragment in fragments:
        assert fragment in err[0], err[0]


def test_bad_numbers_are_refused(capsys, tmp_path):
    one_line_error(capsys, train_cli.main, ["--steps", "0"], "--steps", "at least 1")
    one_line_error(capsys, train_cli.main, ["--steps", "many"], "--steps", "not an integer")
    one_line_error(capsys, train_cli.main, ["--threads", "-2"], "--threads")
    one_line_error(capsys, train_cli.main, ["--grad-accum", "0"], "--grad-accum", "at least 1")
    one_line_error(capsys, train_cli.main, ["--precision", "half"], "--precision", "bfloat16")
    one_line_error(capsys, train_cli.main, ["--target-loss", "0"], "--target-loss", "> 0")
    one_line_error(capsys, train_cli.main, ["--target-loss", "nan"], "--target-loss")
    one_line_error(capsys, train_cli.main, ["--preset", "tiny", "--grad-accum", "3", "--out", str(tmp_path / "g")],
                   "grad_accum (3) must divide batch_size (8)")
    for beta in ("1", "0", "nan"):
        one_line_error(capsys, train_cli.main, ["--preset", "tiny", "--ema", beta, "--out", str(tmp_path / "e")],
                       "ema (", "must be None or a decay in (0, 1)")
    assert not (tmp_path / "e").exists()  # refused before anything is written
    ck = str(tmp_path)
    one_line_error(capsys, sample_cli.main, [ck, "--temperature", "-1"], "--temperature", "≥ 0")
    one_line_error(capsys, sample_cli.main, [ck, "--temperature", "nan"], "--temperature")
    one_line_error(capsys, sample_cli.main, [ck, "--top-k", "0"], "--top-k")
    one_line_error(capsys, sample_cli.main, [ck, "--top-p", "1.5"], "--top-p", "(0, 1]")
    one_line_error(capsys, sample_cli.main, [ck, "--max-new-tokens", "-5"], "--max-new-tokens")


def test_grad_accum_gives_the_run_without_it(trained, tmp_path):
    out, _ = trained
    result = run("--preset", "tiny", "--out", str(tmp_path), "--no-progress", "--threads", "1", "--grad-accum", "4")
    assert result.returncode == 0, result.stderr
    plain = json.loads((out / "log.json").read_text())
    split = json.loads((tmp_path / "log.json").read_text())
    assert [r["val_loss"] for r in split["evaluations"]] == pytest.approx([r["val_loss"] for r in plain["evaluations"]],
                                                                       rel=1e-4)
    assert load_checkpoint(tmp_path / "checkpoint.pt")["train_config"]["grad_accum"] == 4


def test_target_loss_stops_at_the_first_evaluation_that_reaches_it(trained, tmp_path):
    out, _ = trained  # the whole tiny run: evaluations at steps 10 and 20
    plain = json.loads((out / "log.json").read_text())["evaluations"]
    first = plain[0]["val_loss"]
    assert plain[-1]["val_loss"] < first  # the second evaluation is lower, so a target between stops late
    # a target the first evaluation meets: stop there
    early = run("--preset", "tiny", "--out", str(tmp_path / "a"), "--no-progress", "--threads", "1",
                "--target-loss", f"{first + 1e-6:.9f}")
    assert early.returncode == 0, early.stderr
    log = json.loads((tmp_path / "a" / "log.json").read_text())
    assert [r["step"] for r in log["evaluations"]] == [10]
    assert log["target"]["reached"] and log["target"]["step"] == 10
    assert "reached: validation loss" in early.stdout and "at step 10" in early.stdout
    # a target no evaluation meets: the whole run, and the command line says so
    never = run("--preset", "tiny", "--out", str(tmp_path / "c"), "--no-progress", "--threads", "1",
                "--target-loss", "0.01")
    assert never.returncode == 0 and "not reached in 20 steps" in never.stdout
    assert json.loads((tmp_path / "c" / "log.json").read_text())["target"]["reached"] is False


def test_precision_is_recorded_and_kept_on_resume(tmp_path):
    result = run("--preset", "tiny", "--out", str(tmp_path), "--no-progress", "--threads", "1",
                 "--precision", "bfloat16", "--steps", "10")
    assert result.returncode == 0, result.stderr
    assert "bfloat16" in result.stdout.splitlines()[0]
    assert json.loads((tmp_path / "log.json").read_text())["precision"] == "bfloat16"
    assert load_checkpoint(tmp_path / "checkpoint.pt")["precision"] == "bfloat16"
    # resuming with another explicit precision is refused in one line, naming the field
    again = run("--preset", "tiny", "--out", str(tmp_path), "--no-progress", "--resume", "--steps", "10",
                "--precision", "float32")
    assert again.returncode == 2 and "precision" in again.stderr and "Traceback" not in again.stderr


def test_unwritable_out_and_resume_without_checkpoint(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line_error(capsys, train_cli.main, ["--preset", "tiny", "--out", str(blocker / "run")],
                   "--out", "not a writable folder")
    one_line_error(capsys, train_cli.main, ["--preset", "tiny", "--out", str(tmp_path / "new"), "--resume"],
                   "--resume", "no checkpoint.pt")


def test_missing_and_corrupt_checkpoints(capsys, trained, tmp_path):
    one_line_error(capsys, sample_cli.main, [str(tmp_path / "none.pt")], "does not exist")
    out, _ = trained
    good = (out / "checkpoint.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(good[: len(good) // 2])
    one_line_error(capsys, sample_cli.main, [str(tmp_path / "cut.pt")], "corrupt")
    (tmp_path / "empty").mkdir()
    one_line_error(capsys, sample_cli.main, [str(tmp_path / "empty")], "does not exist")


def test_resume_continues_a_finished_run_in_place(capsys, trained, tmp_path):
    out, _ = trained
    run_dir = tmp_path / "again"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes((out / "checkpoint.pt").read_bytes())
    assert train_cli.main(["--preset", "tiny", "--out", str(run_dir), "--resume", "--no-progress"]) == 0
    assert "done: step 20" in capsys.readouterr().out  # nothing left to do: the same final record
    one_line_error(capsys, train_cli.main, ["--preset", "tiny", "--out", str(run_dir), "--resume", "--steps", "30"],
                   "train_config.steps is 20, but this run's is 30")


def test_a_bad_argument_ends_in_one_line_with_status_2(capsys):
    from course_lib._cli import OneLineParser

    parser = OneLineParser(prog="some-command")
    parser.add_argument("--rounds", type=int)
    for argv in (["--bogus"], ["--rounds", "many"]):
        with pytest.raises(SystemExit) as stop:
            parser.parse_args(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("some-command: error: ") and err.count("\n") == 1, err


def test_every_command_line_uses_the_one_line_parser():
    """A plain ArgumentParser answers a bad argument with its usage block too: every command line of
    course_lib and benchmarks/ builds its parser from OneLineParser."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    sources = [*root.glob("course_lib/**/*.py"), *root.glob("benchmarks/*.py")]
    plain = [p.relative_to(root).as_posix() for p in sources
             if "ArgumentParser(" in p.read_text() and p.name != "_cli.py"]
    assert plain == [], f"parsers that are not OneLineParser: {plain}"
    assert any("OneLineParser(" in p.read_text() for p in sources if p.name == "gpu_check.py")
