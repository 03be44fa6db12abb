"""The `performer` command as a user runs it: help, errors, a tiny real run."""

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time

import pytest

from performer import cli
from testlib import ROOT  # gin's search path

SUBCOMMANDS = ("prepare-trembl", "prepare-pg19", "train", "eval", "approx-error", "speed", "figure")


def _run(*args, cwd=None):
  return subprocess.run([sys.executable, "-m", "performer.cli", *args], capture_output=True,
                        text=True, cwd=cwd, env={**os.environ, "JAX_PLATFORMS": "cpu"})


def test_help_lists_every_subcommand():
  result = _run("--help")
  assert result.returncode == 0
  for name in SUBCOMMANDS:
    assert name in result.stdout


@pytest.mark.parametrize("args, message", [
    (("approx-error", "--seq-len", "0"), "--seq-len must be >= 1"),
    (("approx-error", "--features", "8,x"), "comma-separated integers"),
    (("approx-error", "--dim", "12", "--variants", "positive/hadamard/chi"), "power of two"),
    (("approx-error", "--variants", "positive"), "kernel/projection/scaling"),
    (("figure", "mse-vs-m", "--input", "/nonexistent/r.json"), "no such file"),
    (("figure", "nope"), "invalid choice"),
    (("approx-error", "--bogus"), "unrecognized arguments: --bogus"),
    (("approx-error", "--input-scale", "nan"), "finite"),
    (("approx-error", "--out", ""), "output path is empty"),
    (("figure", "table2", "--runs", "results/runs/u_exact", "--out", ""), "output path is empty"),
    (("figure", "mse-vs-m", "--out", "x.txt"), "cannot write .txt"),
    (("prepare-trembl",), "give FASTA files or folders, or --sample"),
    (("prepare-trembl", "/nonexistent.fasta", "--out", "/tmp/x"), "no such file or folder"),
    (("prepare-trembl", "--sample", "--invalid", "drop"), "invalid choice"),
    (("prepare-pg19",), "give one source"),
    (("train", "--gin", "gin/mini/trembl_u_exact.gin", "--gin_param",
      "DataConfig.path='/nonexistent'", "--workdir", "/tmp/x"), "no prepared dataset"),
    (("train", "--gin", "gin/nope.gin", "--workdir", "/tmp/x"), "no such gin file"),
    (("train", "--gin", "gin", "--workdir", "/tmp/x"), "gin is a folder, not a gin file"),
    (("train", "--gin", "gin/mini/trembl_u_exact.gin", "--workdir", "pyproject.toml"),
     "--workdir pyproject.toml is a file, not a folder"),
    (("train", "--gin", "gin/mini/trembl_u_exact.gin", "--gin_param", "DataConfig.task=concat",
      "--workdir", "/tmp/x"), "strings need quotes, as in DataConfig.task='concat'"),
    (("prepare-pg19", "/nonexistent", "--out", "/tmp/x"), "no such folder"),
    # an empty name would be read as the current folder
    (("train", "--gin", "gin/mini/trembl_u_exact.gin", "--workdir", ""), "expected a folder"),
    (("eval", "--workdir", " "), "expected a folder, got an empty name"),
    (("eval", "--workdir", "/tmp/x", "--split", "test,ood,test"), "--split: test is given twice"),
    (("train", "--gin", "gin/mini/trembl_u_exact.gin", "--gin-param", " ", "--workdir", "/tmp/x"),
     "argument --gin-param: expected a gin binding NAME=VALUE, got an empty one"),
    (("reproduce", "--gin-param", "", "--status"), "expected a gin binding NAME=VALUE"),
    (("eval", "--workdir", "/nonexistent/run"), "/nonexistent/run: no such folder"),
    (("archive", "/nonexistent/run", "--to", "/tmp/x"), "/nonexistent/run: no such folder"),
    (("eval", "--workdir", "/tmp/x", "--init-timeout", "-5"),
     "--init-timeout must be a finite number of seconds > 0, got -5.0"),
    (("approx-error", "--features", "16,,32"), "got an empty item in '16,,32'"),
    # an empty name is refused as one, not looked up as a file or folder called ''
    (("train", "--gin", "", "--workdir", "/tmp/x"), "argument --gin: expected a file, got an "
                                                   "empty name"),
    (("archive", "results/runs/u_exact", "--to", ""), "argument --to: expected a folder, got an "
                                                      "empty name"),
    (("figure", "table2", "--runs", ""), "argument --runs: expected a folder, got an empty name"),
    # set from the data: a binding would be ignored while config.gin records it
    (("train", "--gin", "gin/mini/trembl_u_exact.gin", "--gin_param", "ModelConfig.max_len=5",
      "--workdir", "/tmp/x"), "ModelConfig.max_len is set from DataConfig.seq_len"),
    # sizes no host has: refused before anything that large is allocated
    (("approx-error", "--seq-len", "100000000000"), "exact attention's L x L scores and logits: "
                                                    "at least"),
    (("lemma2", "--features", "100000000"), "--features 100000000 x --dim 2: 4096 draws of W"),
    (("lemma2", "--angles", "1000000", "--lengths", "1000000"), "the r grid: at least"),
    (("prepare-mqar", "--out", "/tmp/x", "--eval-examples", "1000000000000"),
     "the test splits' rule baselines: at least"),
    (("lemma2", "--samples", "100000000000"), "--samples 100000000000, --slice-angles 36: the "
                                              "draws: at least"),
    (("lemma2", "--slice-angles", "1000000000000"), "--slice-angles 1000000000000: the draws"),
    (("lemma2", "--dim", "1000000000", "--features", "8"), "--features 8 x --dim 1000000000"),
    (("approx-error", "--seq-len", "16", "--features", "10000000000"),
     "--features 10000000000 x --dim 16 at --seq-len 16: W, q, k, v and the features"),
    (("prepare-mqar", "--out", "/tmp/x", "--test-kv", "8,8"), "8 is given twice in '8,8'"),
    (("prepare-mqar", "--out", "/tmp/x", "--test-kv", "4"), "and from --num-kv 4"),
])
def test_user_errors_are_one_line_with_nonzero_exit(args, message):
  result = _run(*args)
  assert result.returncode == 2
  assert "Traceback" not in result.stderr
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # argparse's too: no usage
  assert message in result.stderr.strip()


def test_a_gin_file_including_a_missing_file_is_a_one_line_error(tmp_path):
  (tmp_path / "a.gin").write_text("include 'gin/missing.gin'\n")
  result = _run("train", "--gin", str(tmp_path / "a.gin"), "--workdir", str(tmp_path / "w"))
  assert result.returncode == 2 and "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines() == [
      "performer train: error: gin: Unable to open file: gin/missing.gin. Searched config paths: "
      f"['', '{ROOT}']. (In file \"{tmp_path / 'a.gin'}\", line 1)"]


def test_a_gin_file_that_is_not_utf8_is_named_in_one_line(tmp_path, capsys):
  bad, including = tmp_path / "bad.gin", tmp_path / "a.gin"
  bad.write_bytes(b"\xffTrainConfig.steps = 1\n")
  including.write_text(f"include '{bad}'\n")
  workdir = str(tmp_path / "w")
  assert cli.main(["train", "--gin", str(bad), "--workdir", workdir]) == 2
  assert capsys.readouterr().err == (f"performer train: error: {bad}: not UTF-8 text (byte 0); "
                                     "gin files are UTF-8\n")
  assert cli.main(["train", "--gin", str(including), "--workdir", workdir]) == 2
  assert capsys.readouterr().err == (f"performer train: error: gin: {bad}: not UTF-8 text "
                                     f"(byte 0) (In file \"{including}\", line 1)\n")


def test_ctrl_c_leaves_the_process_without_interpreter_teardown(monkeypatch, capsys):
  """Ctrl-C ends the console command with os._exit(130) after its message (tearing the
  interpreter down under XLA's threads segfaulted, 2 of 8 tries); a caller's main([...]) gets
  130 back instead."""
  from performer.experiments import approx_error  # pylint: disable=import-outside-toplevel

  def interrupted(args):
    raise KeyboardInterrupt

  def exit_(code):
    raise SystemExit(f"os._exit({code})")

  monkeypatch.setattr(approx_error, "main", interrupted)
  monkeypatch.setattr(os, "_exit", exit_)
  assert cli.main(["approx-error"]) == 130
  monkeypatch.setattr(sys, "argv", ["performer", "approx-error"])
  with pytest.raises(SystemExit, match=r"^os\._exit\(130\)$"):
    cli.main()
  assert capsys.readouterr().err == "performer approx-error: interrupted\n" * 2


def test_a_ctrl_c_python_dropped_in_a_gc_callback_is_raised_again(monkeypatch, capsys):
  """An exception raised in a gc callback (as a Ctrl-C landing in jax's is) is printed and
  dropped by Python; the command then ran to its end. main raises it again after the callback."""
  import gc  # pylint: disable=import-outside-toplevel
  from performer.experiments import approx_error  # pylint: disable=import-outside-toplevel

  def interrupted_in_gc(phase, info):
    del info
    if phase == "start":
      raise KeyboardInterrupt

  def command(args):
    gc.callbacks.append(interrupted_in_gc)
    try:
      gc.collect()
    finally:
      gc.callbacks.remove(interrupted_in_gc)
    end = time.monotonic() + 2  # plain bytecode, where Python raises the interrupt again
    while time.monotonic() < end:
      pass
    return 0

  monkeypatch.setattr(approx_error, "main", command)
  assert cli.main(["approx-error"]) == 130
  assert capsys.readouterr().err == "performer approx-error: interrupted\n"


def test_help_and_version_import_no_command(tmp_path):
  """`performer` and `performer --help` list the commands without importing them (jax takes
  seconds); --version says the installed version."""
  script = ("import sys\nfrom performer import cli\n"
            "try:\n  cli.main(sys.argv[1:])\nexcept SystemExit:\n  pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'flax', 'grain'}))")
  for args in ((), ("--help",)):
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
  assert "prepare-trembl   UniProt FASTA -> token shards" in done.stdout
  assert _run("--version").stdout == f"performer {importlib.metadata.version('performer')}\n"


def test_the_command_list_gives_each_command_module_s_own_summary():
  found = cli._found()  # pylint: disable=protected-access  # read from the sources, not imported
  summaries = {name: summary for _, name, summary in found}
  assert len(summaries) == len(cli.COMMANDS) == 19
  for where in cli.COMMANDS:
    module = importlib.import_module(where)
    assert summaries[module.NAME.replace("_", "-")] == module.SUMMARY, where
    assert module.FLAGS and callable(module.main), where  # one protocol for every command


def test_gin_param_is_dashed_in_help_and_kept_with_its_underscore(tmp_path):
  for command in ("train", "reproduce"):
    parser = cli._parser(command).subparsers.choices[command]  # pylint: disable=protected-access
    text = parser.format_help()
    assert "--gin-param" in text and "--gin_param" not in text
    given = ["--gin-param", "A.x = 1", "--gin_param", "A.y = 2", "--gin-param", "A.z = 3"]
    required = ["--gin", "a.gin", "--workdir", str(tmp_path)] if command == "train" else []
    args = parser.parse_args([*given, *required])
    assert args.gin_param == ["A.x = 1", "A.y = 2", "A.z = 3"]


def test_tiny_approx_error_run_and_figure(tmp_path):
  out = tmp_path / "ae.json"
  result = _run("approx-error", "--seq-len", "32", "--dim", "8", "--features", "4,8",
                "--samples", "2", "--input-scale", "1", "--variants",
                "positive/orthogonal/chi,trig/iid/chi", "--out", str(out))
  assert result.returncode == 0, result.stderr
  assert "median MSE at m=8" in result.stdout
  rows = json.loads(out.read_text())["rows"]
  assert {(r["kernel"], r["m"]) for r in rows} == {("positive", 4), ("positive", 8),
                                                     ("trig", 4), ("trig", 8)}
  result = _run("figure", "mse-vs-m", "--input", str(out), "--out", str(tmp_path / "f.png"))
  assert result.returncode == 0, result.stderr
  assert (tmp_path / "f.png").stat().st_size > 10_000


def test_prepare_samples_from_the_command_line(tmp_path):
  result = _run("prepare-trembl", "--sample", "--out", str(tmp_path / "t"))
  assert result.returncode == 0, result.stderr
  assert "| train |" in result.stdout and "residues/s" in result.stdout
  result = _run("prepare-pg19", "--sample", "--vocab-size", "32768", "--out", str(tmp_path / "p"))
  assert result.returncode == 2 and "at most" in result.stderr and "Traceback" not in result.stderr
  result = _run("prepare-pg19", "--sample", "--out", str(tmp_path / "p"))
  assert result.returncode == 0, result.stderr
  assert "multiplier" in result.stdout
