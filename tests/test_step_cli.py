"""step_cli: the one command-line home. Each way out of a step maps to its exit code and one
sentence; the closing lines name what was written; the parser takes the capture, --out, --run,
--host, --jobs and the step's own options."""

from __future__ import annotations

import errno

import pytest

from tracekit import step_cli

DOC = """Step X: a test step.

Usage:
    python3 -P x.py <capture> [--out DIR]
"""


def step(**kw) -> step_cli.Step:
    return step_cli.Step("x", DOC, __file__, fan_out=False, **kw)


def run(body, argv, capsys, **kw):
    code = step_cli.main(step(**kw), body, argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("exc, code", [
    (step_cli.StepError("the capture is not one"), 1),
    (step_cli.MissingPackage("a package is missing (protobuf); pip install it"), 3),
    (step_cli.StepError("a chosen code", 4), 4),
])
def test_a_step_error_is_one_sentence_and_its_code(exc, code, capsys, tmp_path):
    def body(args):
        raise exc
    got, out, err = run(body, [str(tmp_path), "--out", str(tmp_path)], capsys)
    assert got == code and out == ""
    assert err == f"x: {exc}\n"


def test_a_usage_error_exits_2_with_the_usage_line(capsys, tmp_path):
    def body(args):
        raise step_cli.UsageError("--start must be before --end")
    with pytest.raises(SystemExit) as e:
        step_cli.main(step(), body, [str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("usage: ") and "--start must be before" in err


def test_the_scratch_folder_and_memory_are_sentences(capsys, tmp_path):
    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    def huge(args):
        raise MemoryError
    code, _, err = run(full, [str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert code == 1 and err == f"x: cannot write into {tmp_path / 'o'}: No space left on device\n"
    code, _, err = run(huge, [str(tmp_path / "cap")], capsys)
    assert code == 1 and "too large to analyse in this machine's memory" in err


def test_lines_and_a_verdict_code_of_its_own(capsys, tmp_path):
    def body(args):
        return step_cli.wrote(args.out, [("t.csv", 3), ("r.json", None), ("s.txt", 2),
                                         ("p.svg", 10)]), 4
    code, out, _ = run(body, [str(tmp_path), "--out", str(tmp_path)], capsys)
    assert code == 4
    assert out.splitlines() == [f"wrote {tmp_path / 't.csv'} (3 rows)",
                                f"wrote {tmp_path / 'r.json'}",
                                f"wrote {tmp_path / 's.txt'} (2 lines)",
                                f"wrote {tmp_path / 'p.svg'} (10 bytes)"]


def test_the_parser_takes_the_common_options_and_the_steps_own():
    def options(ap):
        ap.add_argument("--step", type=int)
    ap = step_cli.parser(step_cli.Step("x", DOC, __file__, options=options))
    a = ap.parse_args(["cap", "--out", "o", "--run", "r", "--host", "h", "--jobs", "2",
                       "--step", "3"])
    assert (a.capture, str(a.out), a.run, a.host, a.jobs, a.step) == ("cap", "o", "r", "h", 2, 3)
    assert ap.description == "Step X: a test step."
    scratch_only = step_cli.parser(step_cli.Step("y", DOC, __file__, reads="scratch"))
    assert not hasattr(scratch_only.parse_args([]), "capture")
    checked = step_cli.parser(step_cli.Step("z", DOC, __file__, reads="scratch",
                                            capture_check=True))
    assert checked.parse_args([]).capture is None


def test_a_closed_pipe_and_an_interrupt(capsys):
    def pipe():
        raise BrokenPipeError

    def interrupt():
        raise KeyboardInterrupt
    assert step_cli.run("x", interrupt) == 130
    assert "x: interrupted" in capsys.readouterr().err
    # a closed pipe: exit 141, nothing more said (under capsys stdout has no descriptor to
    # point at /dev/null: that is passed over)
    assert step_cli.run("x", pipe) == 141
    assert capsys.readouterr().err == ""
