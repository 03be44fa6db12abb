"""Associative recall (MQAR, performer/data/mqar.py): every attention of the zoo on a task where
attention variants really differ.

Zoology's shape (Arora et al. 2023, Fig. 2): 2 attention-only layers, one
head, d_model 64, (U), next-token recall scored at the queries only. The rows
(ROWS) are exact softmax; FAVOR+ (positive orthogonal features, chi norms,
stabilised, redrawn every step) at each m of the budget's sweep; at the
budget's m, FAVOR+ never redrawn, with iid projections, hyperbolic, trig and
SMREG features; the estimators published after the paper, FAVOR++ (GERF),
FAVOR# (SADERF) and simplex projections (does a lower kernel variance buy
recall?); Performer-ReLU with random W and with deterministic
features; elu+1 (linear attention); Based's Taylor map on q and k mapped
to TAYLOR_DIM dimensions first, as Based does (on all 64, its 4,161
features cost 13 s a step here); the Reformer; and identity attention, the
chance control.

The learning rate of each row is chosen, not tuned by eye: first one run per
row and rate of the budget's grid (seed TUNE_SEED, none of the replicates'),
evaluated on valid; `recall_lr` writes the table and the choice, the rate of
best valid accuracy (ties: the smaller rate), to <results>/recall_lr.json.
Then the replicates of every row at its chosen rate, evaluated on test (the
fixed 3,000 examples every model sees). The local launcher builds the plan
again once recall_lr.json exists and goes on; under SLURM run `performer
reproduce` again after it. A budget with one rate has no tuning runs.
`recall` draws the figure and decides the claims (figures/recall.py).
"""

import os

from performer.plans import job as job_lib
from performer.plans.context import options, repo

STUDY = "recall"
SUMMARY = ("associative recall (MQAR): exact, FAVOR+ against m and its variants, ReLU, elu+1, "
           "Taylor, Reformer, identity; figure and verdicts")
TUNE_SEED = 100  # the tuning runs' seed: apart from every replicate's
LR_FILE = "recall_lr.md"  # its .json twin holds the chosen rates
TAYLOR_DIM = 16  # Based's feature_dim (its Fig. 3 uses 16 and 24): 1 + 16 + 256 features


def rows(recall):
  """{row name: (attention, attention_options)} of a budget's Recall design."""
  m = recall.num_features
  favor = lambda **extra: ("performer_softmax", {"num_features": m, **extra})
  return {
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


def task_name(task):
  length, kv = task
  return f"L{length}_kv{kv}"


def data_folder(ctx, task):
  return os.path.join(ctx.runs, "data", "mqar", task_name(task))


def chosen_rates(ctx):
  """{task name: {row: learning rate}} once `recall_lr` has written them ({} before)."""
  return ctx.decision(LR_FILE, lambda record: record["chosen"])


def _train(ctx, task, row, lr, seed, stage):
  recall = ctx.budget.recall
  attention, opts = rows(recall)[row]
  length, _ = task
  settings = {"task": task_name(task), "row": row, "lr": lr, "seed": seed, "stage": stage}
  name = f"recall_{task_name(task)}_{row}_" + (f"lr{lr:g}" if stage == "tune" else f"s{seed}")
  gin = tuple(map(repo, ("gin/recall/base.gin", *recall.gin)))
  bindings = (f"DataConfig.path={data_folder(ctx, task)!r}", f"DataConfig.seq_len={length}",
              f"ModelConfig.attention={attention!r}", f"OptimConfig.learning_rate={lr!r}",
              f"TrainConfig.seed={seed}", *((options(**opts),) if opts else ()), *ctx.extra)
  return job_lib.train(name, ctx.runs, gin, bindings, needs=(f"mqar_{task_name(task)}",),
                       study=STUDY, settings=settings)


def jobs(ctx):
  recall = ctx.budget.recall
  if recall is None:
    return []
  out = [job_lib.Job(name=f"mqar_{task_name(t)}", kind="data", study=STUDY,
                     outputs=(os.path.join(data_folder(ctx, t), "manifest.json"),),
                     command=("performer", "prepare-mqar", "--out", data_folder(ctx, t),
                              "--seq-len", str(t[0]), "--num-kv", str(t[1]),
                              "--vocab-size", str(recall.vocab_size),
                              "--eval-examples", str(recall.eval_examples)))
         for t in recall.tasks]
  names = list(rows(recall))
  if len(recall.learning_rates) > 1:
    tune = [_train(ctx, t, row, lr, TUNE_SEED, "tune") for t in recall.tasks for row in names
            for lr in recall.learning_rates]
    out += tune + [j for t in tune for j in ctx.evaluated(t, ("valid",), study=STUDY)]
    out.append(ctx.figure("recall_lr", ("recall-lr", "--runs", *map(ctx.archived, tune)),
                          LR_FILE, needs=[f"{j.name}_archive" for j in tune], study=STUDY))
    chosen = chosen_rates(ctx)
  else:
    chosen = {task_name(t): dict.fromkeys(names, recall.learning_rates[0]) for t in recall.tasks}
  runs = [_train(ctx, t, row, chosen[task_name(t)][row], seed, "replicate")
          for t in recall.tasks if task_name(t) in chosen for seed in recall.seeds
          for row in names]
  if not runs:
    return out
  out += runs + [j for r in runs for j in ctx.evaluated(r, ("test",), study=STUDY)]
  out.append(ctx.figure("recall", ("recall", "--runs", *map(ctx.archived, runs)), "recall.png",
                        needs=[f"{j.name}_archive" for j in runs], study=STUDY))
  return out
