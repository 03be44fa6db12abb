"""Plans: sweeps and names, the budgets' runs against the old script's, selection, fingerprints."""

import dataclasses
import json
import os

import pytest

from performer import configurables, favor, plans
from performer.errors import UserError
from performer.figures import claims
from performer.plans import fig5 as fig5_plan
from performer.plans import fig6 as fig6_plan
from performer.plans import fig16, fig17
from performer.plans import job as job_lib
from performer.plans import recall as recall_plan
from testlib import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))


def test_product_varies_the_last_axis_fastest():
  assert job_lib.product(a=(1, 2), b=("x", "y")) == [
      {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_zipped_pairs_values_and_refuses_axes_of_different_lengths():
  assert job_lib.zipped(a=(1, 2), b=("x", "y")) == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
  with pytest.raises(ValueError, match="differ in length"):
    job_lib.zipped(a=(1, 2), b=("x",))


def test_run_names_come_from_values_so_adding_one_renames_nothing():
  template = "mqar_{attention}_m{num_features}_s{seed}"
  small = [job_lib.run_name(template, s)
           for s in job_lib.product(attention=("exact", "performer_softmax"), num_features=(16,),
                                    seed=(0, 1))]
  large = [job_lib.run_name(template, s)
           for s in job_lib.product(attention=("exact", "performer_softmax"),
                                    num_features=(16, 64), seed=(0, 1))]
  assert set(small) < set(large) and len(set(large)) == 8
  assert "mqar_performer_softmax_m64_s1" in large
  assert job_lib.run_name("r_{on}_{lr}", {"on": False, "lr": 1e-3}) == "r_off_0p001"
  with pytest.raises(ValueError, match="names 'missing'"):
    job_lib.run_name("r_{missing}", {"on": True})


def _relative(values):
  for part, field in (("data", "path"), ("train", "init_from")):
    if values[part][field]:
      values[part][field] = os.path.relpath(values[part][field], ROOT)
  return json.loads(json.dumps(values))  # tuples as lists, as recorded


@pytest.mark.parametrize("budget", ["tiny", "mini", "paper"])
def test_each_budget_trains_exactly_the_runs_of_the_old_script(budget, monkeypatch, tmp_path):
  # script_configs.json: every train of scripts/reproduce.sh (commit 53abbfa) resolved by gin,
  # with its default --runs runs/reproduce/BUDGET, before the plans replaced it.
  recorded = json.load(open(os.path.join(HERE, "script_configs.json")))[budget]
  monkeypatch.chdir(ROOT)
  monkeypatch.setattr("performer.data.samples.fetch", lambda name: f"/sample/{name}")
  ctx = plans.context(budget, results=str(tmp_path))  # not results/: its gate file is real
  # The recall studies (issues 23, 40, 58), ListOps and Fig. 17 (59) are new: no script
  # counterpart.
  trains = {j.name: j for j in plans.build(ctx)
            if j.kind == "train" and j.study not in ("recall", "recall_conv", "recall_kv",
                                                      "listops", "fig17")}
  # Since (issue 22): the identity controls and three replicate seeds. At mini and paper only
  # the gate's models (identity, exact) have them at first, the others' later seeds wait for
  # the gate (test below), so the script's second seed of the (U) Performer-ReLU is not in the
  # plan yet; tiny, a check of every job, runs every seed at once.
  fig6 = {n for n, j in trains.items() if j.study == "fig6"}
  later = ("exact", "identity") if budget != "tiny" else tuple(
      {a for names in fig6_plan.MODELS.values() for a in names})
  assert fig6 == {f"{d}_{a}" for d, names in fig6_plan.MODELS.items() for a in names} | {
      f"{d}_{a}_seed{s}" for d, names in fig6_plan.MODELS.items() for a in names if a in later
      for s in (1, 2)}
  # and the rule's floor of three replicates: a third seed of W in Fig. 15, seeds 1-2 of the
  # kernels Fig. 16's claim compares and of the Fig. 5 protein fine-tunes.
  fig5 = [f"fig5_{d}_{v}" for d, vs in fig5_plan.PROTEIN.items() for v in vs]
  added = {n for n in fig6 if n not in recorded} | {"fig15_redraw_f3", "fig15_no_redraw_f3"} | {
      f"{name}_seed{s}" for name in ("fig16_relu", "fig16_trig", *fig5) for s in (1, 2)} | {
      "fig7_identity", "fig16_control"} | {  # the control lines of Fig. 7 and 16
      f"fig16_{k}{tail}" for k in fig16.BOUNDED for tail in (  # D.3's renormalization on/off
          "_no_renorm", "_no_renorm_seed1", "_no_renorm_seed2", "_seed1", "_seed2")} | {
      "fig16_exp_seed1", "fig16_exp_seed2"}  # Fig. 17 ranks every kernel at seeds 0-2
  for control, like in (("fig7_identity", "fig7_performer_relu"), ("fig16_control", "fig16_relu")):
    configurables.parse(list(trains[control].gin), list(trains[control].bindings))
    ours = configurables.settings()
    configurables.parse(list(trains[like].gin), list(trains[like].bindings))
    theirs = configurables.settings()
    assert ours["model"]["attention"] == "identity"  # trained like the runs it is drawn with
    assert (ours["data"], ours["optim"], ours["train"]["steps"]) == (
        theirs["data"], theirs["optim"], theirs["train"]["steps"])
  assert sorted(set(trains) - added) == sorted(set(recorded) - (
      {"u_performer_relu_seed1"} if budget != "tiny" else set()))
  for name in added:
    del trains[name]
  for name, job in trains.items():
    configurables.parse(list(job.gin), list(job.bindings))
    values = configurables.settings()
    assert values["train"].pop("settings") == job.settings and job.settings
    # Issue 22: the data order follows TrainConfig.seed unless set (the script fixed it at 0).
    assert values["data"].pop("seed") is None and recorded[name]["data"].pop("seed") == 0
    for group, fields in ADDED.items():  # options added since the script, at their defaults
      assert {k: values[group].pop(k) for k in fields} == fields, name
    assert _relative(values) == recorded[name], name


# Config fields added after the script's configs were recorded, and their defaults (issues 40,
# 59).
ADDED = {"model": {"conv_kernel": 0, "qk_dim": 0, "position_embeddings": True,
                   "tie_embeddings": False, "pooling": "", "num_classes": 0},
         "train": {"stop_accuracy": 0.0, "stop_patience": 0, "stop_min_delta": 0.0}}


@pytest.fixture(name="mini")
def _mini(tmp_path):
  return plans.context("mini", runs=str(tmp_path / "runs"), results=str(tmp_path / "results"))


def test_every_job_comes_after_the_jobs_it_needs(mini):
  order = [j.name for j in plans.ordered(plans.build(mini))]
  for job in plans.build(mini):
    assert all(order.index(n) < order.index(job.name) for n in job.needs), job.name


def test_select_pulls_in_what_the_chosen_jobs_need(mini):
  jobs = plans.build(mini)
  chosen = {j.name for j in plans.select(jobs, ["fig5_u_trig"])}
  assert chosen == {"fig5_u_trig", "u_exact", "proteins", "pfam_labels", "swissprot"}
  fig15 = {j.name for j in plans.select(jobs, ["fig15"])}
  assert {"u_performer_softmax", "u_performer_relu", "fig15_redraw", "fig15_claims"} < fig15
  # its claims read the scale gate's runs (gate and margin), not the other Fig. 6 models
  assert {"u_exact_seed2_archive", "b_identity_archive"} < fig15
  assert "u_reformer" not in fig15 and "pg19" not in fig15


def test_an_unknown_name_is_a_short_line_naming_its_flag_and_the_closest_names(mini):
  jobs = plans.build(mini)  # hundreds of jobs: a handful are named, --status lists them all
  with pytest.raises(UserError) as refused:
    plans.select(jobs, ["fig6", "u_exat"])
  message = str(refused.value)
  assert message.startswith("--only: no study or job 'u_exat'; closest: u_exact, "), message
  assert f"; studies: {', '.join(plans.STUDIES)}; " in message
  assert message.endswith("; `performer reproduce --status` lists every job")
  assert len(message) < 250
  with pytest.raises(UserError, match="^--job: no job 'nope'; `performer reproduce --status` "
                                      "lists every job$"):
    plans.select(jobs, ["nope"], flag="--job")
  with pytest.raises(UserError, match="^--job: fig6 is a study, not a job; --only fig6 runs it"):
    plans.select(jobs, ["fig6"], flag="--job")  # --job takes one job, not a study


def test_fingerprints_follow_the_resolved_config_not_the_spelling(mini):
  jobs = plans.build(mini)
  base = plans.resolve(mini, jobs).fingerprints
  assert len(set(base.values())) == len(base)  # every job computes something else
  again = plans.resolve(mini, plans.build(mini)).fingerprints
  assert again == base
  # a binding that sets a value to what it is already: the same run
  same = plans.context("mini", runs=mini.runs, results=mini.results,
                       bindings=("ModelConfig.dropout=0.1",))
  assert plans.resolve(same, plans.build(same)).fingerprints["u_exact"] == base["u_exact"]
  longer = plans.context("mini", runs=mini.runs, results=mini.results, steps=5000)
  changed = plans.resolve(longer, plans.build(longer)).fingerprints
  assert changed["u_exact"] != base["u_exact"]
  assert changed["u_exact_eval"] != base["u_exact_eval"]  # the eval of a changed run is redone
  assert changed["lemma2"] == base["lemma2"]  # reads no run
  # What is fingerprinted: fields off their defaults (a field added later with a default leaves
  # finished runs as they are) and the attention options as the backend resolves them.
  job = plans.build(mini)[[j.name for j in plans.build(mini)].index("u_performer_softmax")]
  configurables.parse(list(job.gin), list(job.bindings))
  values = configurables.settings(changed_only=True)
  assert "dropout" not in values["model"] and values["train"]["steps"] == 1200
  assert values["model"]["attention_options"]["redraw_every"] == 1
  assert values["model"]["attention_options"]["num_features"] == 64
  # an option added after runs were fingerprinted stays out at its default (their archives match)
  assert "feature_dim" not in values["model"]["attention_options"]
  configurables.parse(list(job.gin), [*job.bindings, "ModelConfig.attention_options = "
                                      "{'num_features': 64, 'feature_dim': 8}"])
  assert configurables.settings(changed_only=True)["model"]["attention_options"]["feature_dim"] == 8


def test_the_later_seeds_of_a_direction_join_the_plan_once_its_gate_passed(mini):
  before = {j.name for j in plans.build(mini)}
  assert "u_performer_relu_seed1" not in before and "u_exact_seed2" in before
  gate = plans.build(mini)[[j.name for j in plans.build(mini)].index("fig6_gate")]
  gate_runs = gate.command[gate.command.index("--runs") + 1:gate.command.index("--out")]
  assert sorted(os.path.basename(r) for r in gate_runs) == sorted(
      f"{d}_{a}{s}" for d in "ub" for a in ("exact", "identity") for s in ("", "_seed1", "_seed2"))
  os.makedirs(mini.results)
  with open(os.path.join(mini.results, "fig6_gate.json"), "w") as f:
    json.dump({"gates": {"U": {"passed": True}, "B": {"passed": False}}}, f)
  after = {j.name: j for j in plans.build(mini)}
  added = sorted(set(after) - before)
  assert added == sorted(["fig6_seeds", *(f"u_{a}_seed{s}{job}" for a in (
      "performer_relu", "performer_softmax", "reformer") for s in (1, 2)
      for job in ("", "_eval", "_archive"))])
  table2 = after["table2"].command
  assert f"{mini.results}/runs/u_reformer_seed2" in table2  # the tables read the archives
  assert "u_reformer_seed2_archive" in after["table2"].needs


def test_recall_tunes_each_rows_rate_on_valid_then_trains_the_replicates_at_it(mini):
  rows = list(recall_plan.rows(mini.budget.recall))
  assert len(rows) == 20 and rows[0] == "exact" and rows[-1] == "identity"
  jobs = {j.name: j for j in plans.build(mini) if j.study == "recall"}
  tune = [j for j in jobs.values() if j.kind == "train"]
  assert len(tune) == 20 * 3 and {j.settings["stage"] for j in tune} == {"tune"}
  assert {j.settings["seed"] for j in tune} == {recall_plan.TUNE_SEED}
  assert jobs["recall_L64_kv4_trig_lr0.01_eval"].command[-1] == "valid"  # never test
  assert jobs["mqar_L64_kv4"].kind == "data" and "recall" not in jobs  # no replicates yet
  os.makedirs(mini.results)
  chosen = dict.fromkeys(rows, 0.001) | {"exact": 0.01}
  with open(os.path.join(mini.results, "recall_lr.json"), "w") as f:
    json.dump({"chosen": {"L64_kv4": chosen}}, f)
  after = {j.name: j for j in plans.build(mini) if j.study == "recall"}
  replicates = [j for j in after.values() if j.kind == "train" and j.settings["stage"] != "tune"]
  assert len(replicates) == 20 * 5
  exact = after["recall_L64_kv4_exact_s4"]
  assert "OptimConfig.learning_rate=0.01" in exact.bindings and "TrainConfig.seed=4" in exact.bindings
  assert after["recall_L64_kv4_exact_s4_eval"].command[-1] == "test"
  assert f"{mini.results}/runs/recall_L64_kv4_taylor_s0" in after["recall"].command
  plans.resolve(mini, list(after.values()) + [j for j in plans.build(mini) if j.study == "data"])


def test_fingerprints_do_not_depend_on_where_the_runs_and_the_checkout_are(tmp_path, monkeypatch):
  here = plans.context("mini", runs=str(tmp_path / "a"), results=str(tmp_path / "ra"))
  base = plans.resolve(here, plans.build(here)).fingerprints
  (tmp_path / "elsewhere").mkdir()
  monkeypatch.chdir(tmp_path / "elsewhere")  # the data folders follow the working folder
  there = plans.context("mini", runs=str(tmp_path / "b"), results=str(tmp_path / "rb"))
  assert there.data != here.data
  assert plans.resolve(there, plans.build(there)).fingerprints == base


def test_a_train_keeps_its_fingerprint_when_the_run_it_starts_from_changes(mini):
  jobs = plans.build(mini)
  base = plans.resolve(mini, jobs).fingerprints
  edited = [j if j.name != "u_exact" else job_lib.train(
      "u_exact", mini.runs, j.gin, (*j.bindings, "TrainConfig.steps=7")) for j in jobs]
  prints = plans.resolve(mini, edited).fingerprints
  assert prints["u_exact"] != base["u_exact"]
  assert prints["fig5_u_trig"] == base["fig5_u_trig"]  # resumes its workdir: not redone
  assert prints["error_propagation_u"] != base["error_propagation_u"]


def test_a_bad_binding_names_the_job_before_any_work(mini):
  bad = plans.context("mini", runs=mini.runs, bindings=("ModelConfig.dropout=2.0",))
  with pytest.raises(UserError, match=r"job u_exact: invalid configuration: dropout must be in \[0, 1\), got 2.0"):
    plans.resolve(bad, plans.select(plans.build(bad), ["u_exact"]))
  unknown = plans.context("mini", runs=mini.runs, bindings=("ModelConfig.nonsense=1",))
  with pytest.raises(UserError, match="job u_exact: gin: "):
    plans.resolve(unknown, plans.select(plans.build(unknown), ["u_exact"]))


def test_fig15_and_fig16_record_their_sweep_settings(mini):
  jobs = {j.name: j for j in plans.build(mini)}
  assert jobs["fig15_no_redraw_f2"].settings == {"feature_seed": 2, "schedule": "no_redraw"}
  assert jobs["fig16_gelu"].settings == {"kernel": "gelu"}
  assert "TrainConfig.settings={'kernel': 'gelu'}" in jobs["fig16_gelu"].bindings
  # App. D.3: each bounded kernel without D^-1 at seeds 0-2, and with it at seeds 0-2 too.
  off = jobs["fig16_tanh_no_renorm_seed2"]
  assert off.settings == {"kernel": "tanh", "seed": 2, "renormalize": False}
  assert "TrainConfig.seed=2" in off.bindings
  assert ("ModelConfig.attention_options={'num_features': 64, 'redraw_every': 100, 'kernel': "
          "'tanh', 'renormalize': False}") in off.bindings
  trains = {n for n, j in jobs.items() if n.startswith("fig16_") and j.kind == "train"}
  for kernel in fig16.BOUNDED:
    for seed in ("", "_seed1", "_seed2"):
      assert {f"fig16_{kernel}{seed}", f"fig16_{kernel}_no_renorm{seed}"} <= trains
  assert not any(n.startswith(("fig16_exp_no", "fig16_trig_no")) for n in trains)
  # The declared claims name exactly these kernels, each of which the layer accepts unnormalised.
  declared = [c.a[1]["kernel"] for c in claims.CLAIMS if c.family == "fig16_renormalize"]
  assert tuple(declared) == fig16.BOUNDED
  for kernel in fig16.BOUNDED:
    favor.numerics.check_renormalize(kernel, False)

  # Fig. 17: every kernel at seeds 0-2 at 4x the batch of its Fig. 16 twin, the same steps; the
  # ranking reads both.
  large, small = jobs["fig17_exp_seed2"], jobs["fig16_exp_seed2"]
  assert large.settings == {"kernel": "exp", "seed": 2, "batch_factor": 4}
  assert fig17.base_batch(large) == 4 * fig17.base_batch(small)
  configurables.parse(list(large.gin), list(large.bindings))
  steps = configurables.settings()["train"]["steps"]
  configurables.parse(list(small.gin), list(small.bindings))
  assert configurables.settings()["train"]["steps"] == steps
  ranking = jobs["fig17_ranking"].command
  assert ranking[2] == "kernel-ranking" and sum("/runs/fig16_" in a for a in ranking) == 24
  assert sum("/runs/fig17_" in a for a in ranking) == 24


def test_a_given_dataset_replaces_the_data_jobs(tmp_path):
  data = tmp_path / "proteins"
  data.mkdir()
  with pytest.raises(UserError, match="not a prepare-trembl dataset with an OOD split"):
    plans.context("mini", runs=str(tmp_path), data=str(data))
  (data / "stats.json").write_text(json.dumps({"single": {"ood": {"count": 12}}}))
  ctx = plans.context("mini", runs=str(tmp_path), data=str(data))
  names = {j.name for j in plans.build(ctx)}
  assert "proteins" in names and not {"swissprot", "pfam_labels"} & names


def test_unknown_budget_and_bad_steps_are_refused(tmp_path):
  with pytest.raises(UserError, match="--budget must be one of tiny, mini, paper, got 'huge'"):
    plans.context("huge")
  with pytest.raises(UserError, match="--steps must be a positive integer, got 0"):
    plans.context("mini", runs=str(tmp_path), steps=0)


def test_the_seeds_decision_adds_seeds_only_to_the_models_of_its_claims(mini):
  assert "fig6_seeds" not in {j.name for j in plans.build(mini)}  # not before the gate
  os.makedirs(mini.results)
  with open(os.path.join(mini.results, "fig6_gate.json"), "w") as f:
    json.dump({"gates": {"U": {"passed": True}, "B": {"passed": True}}}, f)
  before = {j.name: j for j in plans.build(mini)}
  decision = before["fig6_seeds"]
  read = decision.command[decision.command.index("--runs") + 1:decision.command.index("--out")]
  assert len(read) == 30 and not any("seed3" in r for r in read)  # the three seeds' runs
  assert decision.outputs == (os.path.join(mini.results, "fig6_seeds.md"),)
  want = lambda claim, attention, seeds: {"claim": claim, "direction": "B", "seeds": seeds,
                                          "attention": attention, "settings": [{}, {}]}
  with open(os.path.join(mini.results, "fig6_seeds.json"), "w") as f:
    json.dump({"more_seeds": [want("softmax", ["performer_softmax", "exact"], 4),
                              want("relu", ["performer_relu", "exact"], 9)]}, f)
  after = {j.name: j for j in plans.build(mini)}
  added = sorted(n for n in set(after) - set(before) if after[n].kind == "train")
  # at most claims.MOST_SEEDS (5) per model, whatever the decision asks
  assert added == ["b_exact_seed3", "b_exact_seed4", "b_performer_relu_seed3",
                   "b_performer_relu_seed4", "b_performer_softmax_seed3"]
  for name in ("fig6_seeds", "fig6_gate"):  # the decisions do not move
    assert after[name].command == before[name].command
  assert f"{mini.results}/runs/b_exact_seed4" in after["claims"].command
  assert after["b_performer_softmax_seed3"].settings["seed"] == 3


def test_recall_conv_tunes_one_rate_per_family_and_reads_favors_rows_after_each_eval(mini):
  design = mini.budget.recall_conv
  rows = recall_plan.rows(design)
  assert list(rows) == list(design.rows) and "reformer" not in rows and len(rows) == 18
  jobs = {j.name: j for j in plans.build(mini) if j.study == "recall_conv"}
  data = jobs["mqar_zoology_L64_kv4"]
  assert data.command[-2:] == ("--test-kv", "8,16") and "--filler" not in data.command
  tuned = sorted(j.settings["row"] for j in jobs.values() if j.kind == "train")
  assert tuned == sorted([r for r in ("exact", "favor_m256", "relu", "elu_plus_one", "taylor",
                                      "identity") for _ in range(3)])
  tune = jobs["recall_conv_L64_kv4_favor_m256_lr0.003"]
  assert "TrainConfig.steps=2000" in tune.bindings
  assert any(g.endswith("gin/recall/zoology.gin") for g in tune.gin)
  os.makedirs(mini.results)
  chosen = {"exact": 0.01, "favor_m256": 0.003, "relu": 0.001, "elu_plus_one": 0.001,
            "taylor": 0.001, "identity": 0.001}
  with open(os.path.join(mini.results, "recall_conv_lr.json"), "w") as f:
    json.dump({"chosen": {"L64_kv4": chosen}}, f)
  after = {j.name: j for j in plans.build(mini) if j.study == "recall_conv"}
  name = "recall_conv_L64_kv4_{}_s2"
  for row, lr in (("favor_m16", 0.003), ("favorsharp", 0.003), ("relu_deterministic", 0.001)):
    assert f"OptimConfig.learning_rate={lr!r}" in after[name.format(row)].bindings  # its family's
    assert "TrainConfig.steps=2000" not in after[name.format(row)].bindings
  assert after[name.format("trig") + "_eval"].command[-1] == "test,test_shuffled,test_kv8,test_kv16"
  probe = after[name.format("favorpp") + "_rows"]  # FAVOR's rows read before the archive
  assert probe.command[1] == "recall-rows" and probe.needs == (name.format("favorpp") + "_eval",)
  assert after[name.format("favorpp") + "_archive"].needs == (probe.name,)
  assert name.format("relu") + "_rows" not in after and name.format("exact") + "_rows" not in after
  assert len([j for j in after.values() if j.kind == "train"]) == 6 * 3 + 18 * 3
  plans.resolve(mini, list(after.values()) + [j for j in plans.build(mini) if j.study == "data"])


def test_recall_conv_adds_seeds_only_to_the_rows_of_claims_that_more_seeds_would_resolve(mini):
  os.makedirs(mini.results)
  rows = recall_plan.rows(mini.budget.recall_conv)
  with open(os.path.join(mini.results, "recall_conv_lr.json"), "w") as f:
    json.dump({"chosen": {"L64_kv4": dict.fromkeys(rows, 0.01)}}, f)
  first = {j.name: j for j in plans.build(mini) if j.study == "recall_conv"}
  seeds = first["recall_conv_seeds"]  # the first seeds' figure decides; the final one waits
  assert "recall_conv" not in first and seeds.outputs[0].endswith("recall_conv_seeds.png")
  assert sorted(seeds.needs) == sorted(f"recall_conv_L64_kv4_{r}_s{s}_archive"
                                        for r in rows for s in (0, 1, 2))
  record = {"tasks": {"L64_kv4": {"more_seeds": [
      {"claim": "FAVOR++ better than FAVOR+", "rows": ["favorpp", "favor_m256"], "seeds": 4},
      {"claim": "FAVOR+ m=256 matches exact", "rows": ["favor_m256", "exact"], "seeds": 5}]}}}
  with open(os.path.join(mini.results, "recall_conv_seeds.json"), "w") as f:
    json.dump(record, f)
  after = {j.name: j for j in plans.build(mini) if j.study == "recall_conv"}
  added = sorted(n for n, j in after.items() if j.kind == "train" and n not in first)
  assert added == ["recall_conv_L64_kv4_exact_s3", "recall_conv_L64_kv4_exact_s4",
                   "recall_conv_L64_kv4_favor_m256_s3", "recall_conv_L64_kv4_favor_m256_s4",
                   "recall_conv_L64_kv4_favorpp_s3"]
  assert after["recall_conv_L64_kv4_favorpp_s3"].settings["seed"] == 3
  assert "TrainConfig.seed=4" in after["recall_conv_L64_kv4_exact_s4"].bindings
  assert "recall_conv_L64_kv4_favorpp_s3_rows" in after  # probed like the first seeds
  final = after["recall_conv"]
  assert set(final.needs) == {f"{n}_archive" for n in after if after[n].kind == "train"
                              and after[n].settings["stage"] == "replicate"}
  assert all(after[n] == j for n, j in first.items())  # the first seeds' jobs unchanged
  # A decision that asks for nothing: the figure of the first seeds' runs alone.
  with open(os.path.join(mini.results, "recall_conv_seeds.json"), "w") as f:
    json.dump({"tasks": {"L64_kv4": {"more_seeds": []}}}, f)
  none = {j.name: j for j in plans.build(mini) if j.study == "recall_conv"}
  assert set(none) == set(first) | {"recall_conv"}
  assert set(none["recall_conv"].needs) == set(seeds.needs)
  # Seeds are counted, not named: first seeds 10-12, a fourth is seed 13.
  design = dataclasses.replace(mini.budget.recall_conv, seeds=(10, 11, 12))
  later = recall_plan.study_jobs(dataclasses.replace(
      mini, budget=dataclasses.replace(mini.budget, recall_conv=design)), design, "recall_conv")
  with open(os.path.join(mini.results, "recall_conv_seeds.json"), "w") as f:
    json.dump(record, f)
  added = {j.name for j in recall_plan.study_jobs(dataclasses.replace(
      mini, budget=dataclasses.replace(mini.budget, recall_conv=design)), design, "recall_conv")
      if j.kind == "train"} - {j.name for j in later if j.kind == "train"}
  assert sorted(added) == ["recall_conv_L64_kv4_exact_s13", "recall_conv_L64_kv4_exact_s14",
                           "recall_conv_L64_kv4_favor_m256_s13",
                           "recall_conv_L64_kv4_favor_m256_s14", "recall_conv_L64_kv4_favorpp_s13"]
  # A decision that cannot be read, or names a row of another design: one line, not a silence.
  for text, why in (('{"tasks": {"L64_kv4": {}}}', "cannot be read"),
                    ('{"tasks": {"L64_kv4": {"more_seeds": [{"rows": ["reformer"], "seeds": 4}]}}}',
                     "names reformer of L64_kv4, not in the plan")):
    with open(os.path.join(mini.results, "recall_conv_seeds.json"), "w") as f:
      f.write(text)
    with pytest.raises(UserError, match=why):
      plans.build(mini)
