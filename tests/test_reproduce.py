"""`performer reproduce` end to end at the tiny budget (local launcher), and get_swissprot.sh's arguments."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from performer import plans, verdicts
from performer.figures import claims as claims_lib
from performer.figures import listops as listops_figure
from performer.plans import budgets, fig6, recall
from testlib import ROOT

EXPERIMENTS = [f"{d}_{a}" + (f"_seed{s}" if s else "") for s in fig6.REPLICATES
               for d, names in fig6.MODELS.items() for a in names]
CLAIMS = [claim.id for claim in claims_lib.CLAIMS if claim.family == "table2"]
VERDICTS = {verdicts.REPRODUCED, verdicts.CONTRADICTED, verdicts.INCONCLUSIVE,
            verdicts.NOT_TESTABLE, verdicts.NOT_TESTED}


REPRODUCE = [sys.executable, "-m", "performer.cli", "reproduce", "--budget", "tiny"]


def _reproduce(*args):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  return subprocess.run([*REPRODUCE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                        check=False)


def _log(runs, job):
  """The last attempt's log of a job."""
  folder = runs / "logs" / job
  return (folder / max(os.listdir(folder), key=lambda f: int(f.split(".")[0]))).read_text()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  runs = tmp_path_factory.mktemp("reproduce")
  done = _reproduce("--runs", str(runs), "--only", "fig6")
  assert done.returncode == 0, done.stderr[-3000:]
  return runs, done.stdout


# One experiment of each appendix kind, on the fig6 runs above (the whole appendix: slow test).
APPENDIX = ["fig5_u_positive", "fig5_b_linformer", "fig5_text_source", "fig5_text_positive",
            "fig7_exact_1l", "fig15_no_redraw_f1", "fig16_identity"]
PROBES = {"lemma2": ["lemma2.json", "fig2_lemma2.png"],
          "error_propagation": ["error_propagation_u.json", "error_propagation_b.json",
                                "fig14_error_propagation_u.png", "fig14_error_propagation_b.png"],
          "attention_maps": ["fig10_attention_maps.png"],
          "aa_similarity": ["aa_similarity.json", "fig13_aa_similarity.png"]}


@pytest.fixture(scope="module")
def appendix(tiny):
  """The whole plan on top of the fig6 runs: every appendix run, probe, table and figure."""
  runs, _ = tiny
  done = _reproduce("--runs", str(runs))
  assert done.returncode == 0, done.stderr[-3000:]
  return runs, done.stdout


@pytest.mark.slow  # ~3 min on top of the fig6 fixture; each appendix figure has fast tests of its own
def test_appendix_runs_train_with_their_settings(appendix):
  runs, _ = appendix
  config = lambda name: json.load(open(runs / name / "config.json"))
  positive = config("fig5_u_positive")
  assert positive["train"]["init_from"] == str(runs / "u_exact")
  assert positive["model"]["attention_options"] == {"num_features": 16, "redraw_every": 1,
                                                     "seed": 0}  # the run's seed
  rows = [json.loads(line) for line in open(runs / "fig5_u_positive" / "metrics.jsonl")]
  assert {(r["step"], r["split"]) for r in rows} >= {(0, "valid"), (3, "valid")}  # transfer, end
  assert config("fig5_b_linformer")["model"]["causal"] is False
  text = config("fig5_text_positive")
  assert text["train"]["init_from"] == str(runs / "fig5_text_source")
  assert text["data"]["path"] == str(runs / "data" / "pg19-sample")
  concat = config("fig7_exact_1l")
  assert concat["data"]["task"] == "concat" and concat["model"]["num_layers"] == 1
  assert concat["model"]["d_model"] == 256
  assert config("fig15_no_redraw_f1")["model"]["attention_options"] == \
      {"num_features": 16, "redraw_every": 0, "seed": 1}
  assert config("fig16_identity")["model"]["attention_options"]["kernel"] == "identity"
  for name in APPENDIX:  # per-sequence test evals for the appendix claims; the text runs: curves
    assert (runs / name / "eval_test_sequences.npz").exists() == (not name.startswith("fig5_text"))
    assert not (runs / name / "eval_ood.json").exists()  # OOD: Table 2's runs only


@pytest.mark.slow  # shares the appendix fixture above
def test_appendix_figures_and_probe_results_are_written(appendix):
  runs, stdout = appendix
  results = runs / "results"
  for name in ("fig5_backward_compat", "fig7_concat_accuracy", "fig15_redraw", "fig15_trig_full",
               "fig16_kernels"):
    assert (results / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
  for files in PROBES.values():
    for name in files:
      assert (results / name).stat().st_size > 0, name
  assert json.load(open(results / "lemma2.json"))["experiment"] == "lemma2"
  assert (runs / "probes" / "attention_maps.json").exists()
  again = _reproduce("--runs", str(runs), "--only", "probes")  # done: skipped
  assert again.returncode == 0 and "started" not in again.stdout, again.stdout


@pytest.mark.slow  # the tiny fig6 run: ~2.5 min; tables, figures and verdicts have fast tests
def test_every_experiment_is_trained_and_evaluated_on_test_and_ood(tiny):
  runs, _ = tiny
  for name in EXPERIMENTS:
    config = json.load(open(runs / name / "config.json"))
    settings = config["train"]["settings"]
    assert config["train"]["steps"] == 3 and config["train"]["seed"] == settings["seed"]
    assert config["data"]["seed"] == settings["seed"]  # the replicate varies the data order too
    assert config["model"]["causal"] == name.startswith("u_")
    assert config["train"]["settings"]["direction"] == name[0]  # the sweep's settings, recorded
    for split in ("test", "ood"):
      result = json.load(open(runs / name / f"eval_{split}.json"))
      assert result["step"] == 3 and result["split"] == split and result["tokens"] > 0
  assert json.load(open(runs / "b_linformer_seed2" / "config.json"))["model"]["attention_options"] == \
      {"num_projections": 16, "seed": 2}


@pytest.mark.slow  # the tiny fig6 run: ~2.5 min; tables, figures and verdicts have fast tests
def test_every_table_figure_and_verdict_row_is_written(tiny):
  runs, stdout = tiny
  results = runs / "results"
  for name in ("table1", "table2", "claims"):
    assert (results / f"{name}.md").stat().st_size > 0
  for metric in ("accuracy", "perplexity"):
    assert (results / f"fig6_{metric}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  table2 = list(csv.DictReader(open(results / "table2.csv")))
  by_run = {row["run"]: row for row in table2 if row["run"] in EXPERIMENTS}
  assert sorted(by_run) == sorted(EXPERIMENTS)
  for name in EXPERIMENTS:  # the table holds the eval files' numbers
    test = json.load(open(runs / name / "eval_test.json"))
    ood = json.load(open(runs / name / "eval_ood.json"))
    row = by_run[name]
    assert float(row["test accuracy %"]) == pytest.approx(100 * test["accuracy"])
    assert float(row["OOD perplexity"]) == pytest.approx(ood["perplexity"])
  claims = list(csv.DictReader(open(results / "claims.csv")))
  assert [row["claim"] for row in claims] == CLAIMS
  assert all(row["verdict"] in VERDICTS and row["why"] for row in claims)
  assert "not tested" not in {row["verdict"] for row in claims}  # every model was run
  table1 = list(csv.DictReader(open(results / "table1.csv")))
  stats = json.load(open(runs / "data" / "sample" / "stats.json"))
  ours = {row["split"]: row for row in table1 if row["source"] == "ours" and row["task"] == "single"}
  assert int(ours["ood"]["sequences / chunks"]) == stats["single"]["ood"]["count"] > 0
  assert "every job has finished" in stdout


@pytest.mark.slow  # ~8 min more: every appendix run at the tiny budget
def test_the_whole_appendix_runs_at_the_tiny_budget(appendix):
  runs, _ = appendix
  for name in ("fig5_u_exact", "fig5_u_no_redraw", "fig5_u_trig", "fig5_u_smreg", "fig5_b_exact",
               "fig5_b_positive", "fig5_text_exact", "fig5_text_no_redraw", "fig5_text_trig",
               "fig5_text_smreg", "fig7_exact_2l", "fig7_exact_3l", "fig7_performer_relu",
               "fig15_redraw_f1", "fig15_redraw_f2", "fig15_no_redraw_f2", "fig16_sigmoid",
               "fig16_exp", "fig16_relu", "fig16_abs", "fig16_gelu", "fig16_trig", "fig16_tanh"):
    assert (runs / name / "config.json").exists(), name


@pytest.mark.slow  # part of the whole tiny plan above: the recall study's runs
def test_the_recall_study_runs_at_the_tiny_budget(appendix):
  runs, _ = appendix
  results = runs / "results"
  record = json.loads((results / "recall.json").read_text())["tasks"]["L16_kv2"]
  planned = recall.rows(budgets.BUDGETS["tiny"].recall)  # the plan's rows, not a count kept here
  assert set(record["rows"]) == set(planned) and all(len(r["accuracies"]) == 2
                                                       for r in record["rows"].values())
  assert {c["verdict"] for c in record["claims"]} <= VERDICTS and record["claims"]
  for name in ("recall.png", "recall.md", "recall_claims.md"):
    assert (results / name).stat().st_size > 0, name
  with np.load(results / "runs" / "recall_L16_kv2_taylor_s1" / "eval_test_sequences.npz") as f:
    assert f["tokens"].tolist() == [2.0] * 16  # the kv = 2 queries of each test example


@pytest.mark.slow  # part of the whole tiny plan above: recall_kv, on recall_conv's rates
def test_the_confirmatory_recall_study_runs_at_the_tiny_budget(appendix):
  runs, _ = appendix
  record = json.loads((runs / "results" / "recall_kv.json").read_text())
  design = budgets.BUDGETS["tiny"].recall_kv
  assert set(record["rows"]) == set(design.rows)
  assert {c["split"] for c in record["claims"]} == {"test_kv4"} and record["claims"]
  assert {c["verdict"] for c in record["claims"]} <= VERDICTS
  lr = json.loads((runs / "results" / "recall_conv_lr.json").read_text())["chosen"]["L16_kv2"]
  config = json.loads((runs / "results" / "runs" / "recall_kv_L16_kv2_relu_s2" /
                       "config.json").read_text())
  assert config["optim"]["learning_rate"] == lr["relu"]  # recall_conv's rate, not tuned anew
  assert (runs / "results" / "runs" / "recall_kv_L16_kv2_favor_m8_s3" / "recall_rows.json").exists()


@pytest.mark.slow  # part of the whole tiny plan above: the ListOps study
def test_the_listops_study_runs_at_the_tiny_budget(appendix):
  runs, _ = appendix
  record = json.loads((runs / "results" / "listops.json").read_text())
  design = budgets.BUDGETS["tiny"].listops
  assert set(record["rows"]) == set(design.rows)
  assert all(len(r["accuracies"]) == len(design.seeds) for r in record["rows"].values())
  assert [c["id"] for c in record["claims"]] == [c[0] for c in listops_figure.DECLARED]
  with np.load(runs / "results" / "runs" / "listops_exact_s1" / "eval_test_sequences.npz") as f:
    assert f["tokens"].tolist() == [1.0] * 16  # one label per test expression


@pytest.mark.slow  # the tiny fig6 run: ~2.5 min; tables, figures and verdicts have fast tests
def test_a_second_run_resumes_with_nothing_left_to_do(tiny):
  runs, _ = tiny
  done = _reproduce("--runs", str(runs), "--only", "u_exact_eval", "--jobs", "1")
  assert done.returncode == 0, done.stderr[-2000:]
  assert "4 jobs, 4 finished before" in done.stdout and "started" not in done.stdout, done.stdout
  status = _reproduce("--runs", str(runs), "--only", "fig6", "--status")
  jobs = plans.select(plans.build(plans.context("tiny", runs=str(runs))), ["fig6"])
  assert status.stdout.splitlines()[-1].startswith(f"{len(jobs)} done;"), status.stdout


@pytest.mark.slow  # ~1.5 min: two tiny runs of 400 steps, stopped and resumed
def test_a_sigterm_to_the_group_stops_every_train_with_a_checkpoint_and_the_same_command_resumes(
    tmp_path):
  args = ["--runs", str(tmp_path), "--only", "fig16_relu,fig16_abs", "--steps", "400",
          "--jobs", "2"]
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  launcher = subprocess.Popen([*REPRODUCE, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
  logs = [tmp_path / "logs" / f"fig16_{k}" / "1.log" for k in ("relu", "abs")]
  deadline = time.time() + 240
  while not all(log.exists() and "train:" in log.read_text() for log in logs):  # both stepping
    assert launcher.poll() is None and time.time() < deadline, launcher.stdout.read()[-2000:]
    time.sleep(1)
  os.killpg(launcher.pid, signal.SIGTERM)  # the whole group, as `kill -TERM -PGID` and schedulers
  out, _ = launcher.communicate(timeout=120)
  assert launcher.returncode == 130, out
  assert "interrupted: fig16_relu, fig16_abs; run the same command to resume" in out or \
      "interrupted: fig16_abs, fig16_relu; run the same command to resume" in out, out
  saved = []
  for log in logs:
    text = log.read_text()
    assert "resumes from step" in text, text[-1000:]
    saved.append(int(text.split("resumes from step ")[1].split()[0]))
  assert all(0 < step < 400 for step in saved)
  done = _reproduce(*args)
  assert done.returncode == 0, done.stdout[-2000:]
  for log, step in zip(logs, saved):  # each attempt keeps its own log
    second = (log.parent / "2.log").read_text()
    assert f"from step {step}" in second, second[-1000:]
    rows = [json.loads(line) for line in (tmp_path / log.parent.name / "metrics.jsonl").open()]
    assert max(r["step"] for r in rows) == 400


@pytest.mark.parametrize("args, message", [
    ([], "usage:"), (["out.fasta"], "OUT must end in .gz"), (["o.gz", "--ftp"], "usage:")])
def test_get_swissprot_refuses_bad_arguments(args, message):
  done = subprocess.run(["bash", "scripts/get_swissprot.sh", *args], cwd=ROOT, capture_output=True,
                        text=True, check=False)
  assert done.returncode == 2 and message in done.stderr
