"""Associative recall (MQAR, data/mqar.py): every attention of the zoo, on a task where they differ.

Each row's learning rate is chosen on valid by tuning runs; `study_jobs` builds any design."""

import os

from performer.errors import UserError
from performer.figures import recall_claims
from performer.plans import job as job_lib
from performer.plans.context import options, repo

STUDY = "recall"
SUMMARY = ("associative recall (MQAR): exact, FAVOR+ against m and its variants, ReLU, elu+1, "
           "Taylor, Reformer, identity; figure and verdicts")
TUNE_SEED = 100  # the tuning runs' seed: apart from every replicate's
TAYLOR_DIM = 16  # Based's feature_dim (its Fig. 3 uses 16 and 24): 1 + 16 + 256 features
# Rows whose rate is their family's (Recall.tune_families): every FAVOR+ estimator of softmax
# takes the rate chosen for FAVOR+ at the design's m, deterministic ReLU's is random-W ReLU's.
SOFTMAX_ESTIMATORS = ("performer_softmax", "performer_favorpp", "performer_favorsharp")
FAVOR_VARIANTS = ("favor_no_redraw", "favor_iid", "hyperbolic", "trig", "smreg", "favorpp",
                  "favorsharp", "simplex")


def family(recall, row):
  """The row whose tuning runs choose `row`'s rate (itself unless Recall.tune_families)."""
  if not recall.tune_families:
    return row
  if row.startswith("favor_m") or row in FAVOR_VARIANTS:
    return f"favor_m{recall.num_features}"
  return "relu" if row == "relu_deterministic" else row


def rows(recall):
  """{row name: (attention, attention_options)} of a budget's Recall design (Recall.rows)."""
  m = recall.num_features
  favor = lambda **extra: ("performer_softmax", {"num_features": m, **extra})
  every = {
      "exact": ("exact", {}),
      **{f"favor_m{k}": ("performer_softmax", {"num_features": k})
         for k in recall.feature_sweep},
      "favor_no_redraw": favor(redraw_every=0),
      "favor_iid": favor(projection="iid"),
      "hyperbolic": favor(kernel="hyperbolic"),
      "trig": favor(kernel="trig"),
      "smreg": favor(scaling="sqrt_d"),
      "favorpp": ("performer_favorpp", {"num_features": m}),
      "favorsharp": ("performer_favorsharp", {"num_features": m}),
      "simplex": favor(projection="simplex"),
      "relu": ("performer_relu", {"num_features": m}),
      "relu_deterministic": ("performer_relu", {"features": "deterministic"}),
      "elu_plus_one": ("linear", {}),
      "taylor": ("performer_relu", {"kernel": "taylor", "features": "deterministic",
                                    "feature_dim": TAYLOR_DIM}),
      "reformer": ("reformer", {}),
      "identity": ("identity", {}),
  }
  unknown = set(recall.rows) - set(every)
  if unknown:
    raise ValueError(f"Recall.rows: no row {', '.join(sorted(unknown))} (rows: {', '.join(every)})")
  return {row: every[row] for row in (recall.rows or every)}


def task_name(task):
  length, kv = task
  return f"L{length}_kv{kv}"


def data_folder(ctx, recall, task):
  return os.path.join(ctx.runs, "data", recall.data, task_name(task))


def lr_file(study):
  """The table of a study's tuning runs; its .json twin holds the chosen rates."""
  return f"{study}_lr.md"


def chosen_rates(ctx, study):
  """{task name: {tuned row: learning rate}} once `recall_lr` has written them ({} before)."""
  return ctx.decision(lr_file(study), lambda record: record["chosen"])


def _train(ctx, recall, study, task, row, lr, seed, stage):
  attention, opts = rows(recall)[row]
  length, _ = task
  settings = {"task": task_name(task), "row": row, "lr": lr, "seed": seed, "stage": stage}
  name = f"{study}_{task_name(task)}_{row}_" + (f"lr{lr:g}" if stage == "tune" else f"s{seed}")
  gin = tuple(map(repo, ("gin/recall/base.gin", *recall.gin)))
  steps = (f"TrainConfig.steps={recall.tune_steps}",) if stage == "tune" and recall.tune_steps else ()
  bindings = (f"DataConfig.path={data_folder(ctx, recall, task)!r}", f"DataConfig.seq_len={length}",
              f"ModelConfig.attention={attention!r}", f"OptimConfig.learning_rate={lr!r}",
              f"TrainConfig.seed={seed}", *((options(**opts),) if opts else ()), *steps,
              *ctx.extra)
  return job_lib.train(name, ctx.runs, gin, bindings, needs=(f"{recall.data}_{task_name(task)}",),
                       study=study, settings=settings)


def _rows_probe(train, evaluate, study, split):
  """`performer recall-rows` on a replicate's `split`, after its eval (the checkpoint is still
  there): <workdir>/recall_rows.json, which the archive keeps."""
  out = os.path.join(train.workdir, "recall_rows.json")
  return job_lib.Job(name=f"{train.name}_rows", kind="probe", study=study, needs=(evaluate.name,),
                     command=("performer", "recall-rows", "--run", train.workdir, "--out", out,
                              *(("--split", split) if split != "test" else ())),
                     outputs=(out,))


def jobs(ctx):
  return study_jobs(ctx, ctx.budget.recall, STUDY)


def study_jobs(ctx, recall, study):
  """Every job of Recall design `recall` as study `study` ([] without a design): the tasks'
  data, the tuning runs and their table, then the replicates, their evals and the figure."""
  if recall is None:
    return []
  if recall.rates_from:  # another study's data, tuning and rates
    return _replicates(ctx, recall, study, list(rows(recall)),
                       chosen_rates(ctx, recall.rates_from), [])
  out = [job_lib.Job(name=f"{recall.data}_{task_name(t)}", kind="data", study=study,
                     outputs=(os.path.join(data_folder(ctx, recall, t), "manifest.json"),),
                     command=("performer", "prepare-mqar", "--out", data_folder(ctx, recall, t),
                              "--seq-len", str(t[0]), "--num-kv", str(t[1]),
                              "--vocab-size", str(recall.vocab_size),
                              "--eval-examples", str(recall.eval_examples), *recall.data_flags))
         for t in recall.tasks]
  names = list(rows(recall))
  if len(recall.learning_rates) > 1:
    tuned = [row for row in names if family(recall, row) == row]
    tune = [_train(ctx, recall, study, t, row, lr, TUNE_SEED, "tune") for t in recall.tasks
            for row in tuned for lr in recall.learning_rates]
    out += tune + [j for t in tune for j in ctx.evaluated(t, ("valid",), study=study)]
    out.append(ctx.figure(f"{study}_lr", ("recall-lr", "--runs", *map(ctx.archived, tune)),
                          lr_file(study), needs=[f"{j.name}_archive" for j in tune], study=study))
    chosen = chosen_rates(ctx, study)
  else:
    chosen = {task_name(t): dict.fromkeys(names, recall.learning_rates[0]) for t in recall.tasks}
  return _replicates(ctx, recall, study, names, chosen, out)


def _replicates(ctx, recall, study, names, chosen, out):
  """`out` and the replicates of every row at its `chosen` rate ({task name: {row: rate}}),
  their evals, the seeds decision and the study's figure."""
  rate = lambda t, row: chosen[task_name(t)][family(recall, row)]
  runs = [_train(ctx, recall, study, t, row, rate(t, row), seed, "replicate")
          for t in recall.tasks if task_name(t) in chosen for seed in recall.seeds
          for row in names]
  if not runs:
    return out
  out += runs + _evaluated(ctx, recall, study, runs)
  if recall.seeds_decision:  # the first seeds' verdicts decide which rows get more
    out.append(ctx.figure(f"{study}_seeds", ("recall", "--runs", *map(ctx.archived, runs)),
                          seeds_file(study), needs=[f"{j.name}_archive" for j in runs],
                          study=study))
    wanted = more_seeds(ctx, study, [(task_name(t), row) for t in recall.tasks for row in names])
    if wanted is None:
      return out  # the figure waits for the decision (a plan built after it adds the runs)
    first = max(recall.seeds) + 1
    extra = range(first, first + recall_claims.MOST_SEEDS - len(recall.seeds))
    more = [_train(ctx, recall, study, t, row, rate(t, row), seed, "replicate")
            for count, seed in enumerate(extra, len(recall.seeds) + 1)
            for t in recall.tasks if task_name(t) in chosen for row in names
            if wanted.get((task_name(t), row), 0) >= count]
    out += more + _evaluated(ctx, recall, study, more)
    runs += more
  out.append(ctx.figure(study, (recall.figure, "--runs", *map(ctx.archived, runs)), f"{study}.png",
                        needs=[f"{j.name}_archive" for j in runs], study=study))
  return out


def _evaluated(ctx, recall, study, runs):
  """Each replicate's eval on the design's splits, its recall-rows probe (softmax estimators,
  Recall.mechanism) and its archive."""
  out = []
  for r in runs:
    evaluate, archive = ctx.evaluated(r, recall.splits, study=study)
    if recall.mechanism and rows(recall)[r.settings["row"]][0] in SOFTMAX_ESTIMATORS:
      probe = _rows_probe(r, evaluate, study, recall.probe_split)
      out += [evaluate, probe, ctx.archive(r, probe, study=study)]
    else:
      out += [evaluate, archive]
  return out


def seeds_file(study):
  """The figure of a study's first seeds (Recall.seeds_decision); its .json twin holds, per
  task, the claims that more seeds would resolve (figures/recall_claims.py decide)."""
  return f"{study}_seeds.png"


def more_seeds(ctx, study, planned):
  """{(task, row): seeds} once the seeds decision is written (None before): each row of a
  claim that more seeds would resolve, at the most seeds any of its claims asks for.

  Raises:
    UserError: a decision file that cannot be read, or that names a (task, row) not in
      `planned` (another design's): its figure job must run again.
  """
  def read(record):
    wanted = {}
    for task, decided in record["tasks"].items():
      for want in decided["more_seeds"]:
        for row in want["rows"]:
          wanted[task, row] = max(wanted.get((task, row), 0), int(want["seeds"]))
    return {"rows": wanted}
  path = ctx.result(os.path.splitext(seeds_file(study))[0] + ".json")
  if not os.path.exists(path):
    return None
  wanted = ctx.decision(seeds_file(study), read).get("rows")
  unknown = sorted(set(wanted or ()) - set(planned))
  if wanted is None or unknown:
    why = f"names {unknown[0][1]} of {unknown[0][0]}, not in the plan" if unknown else (
        "cannot be read")
    raise UserError(f"{path} {why}: delete it and run performer reproduce again (its figure job "
                    f"{study}_seeds decides anew)")
  return wanted
