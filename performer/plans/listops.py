"""LRA ListOps (data/listops.py): every attention of the zoo as a (B) classifier at Skyformer's
setting (gin/listops/), the Performer claims decided by the rule (figures/listops.py)."""

import os

from performer.plans import job as job_lib
from performer.plans.context import options, repo

STUDY = "listops"
SUMMARY = ("LRA ListOps: Transformer, Performer-softmax at m = 128 and m = 2, Performer-ReLU, "
           "elu+1, Linformer, Reformer and identity; figure and verdicts")
DATA = "listops_data"  # the data job
# {row: (attention, attention_options)}: Skyformer's 128 features, its Linformer's k = 256.
# Exact softmax in blocks of 500 keys (exact_blockwise): the same attention, in a quarter of
# exact's step time at L = 2,000 here (results/listops_step_times.json).
ROWS = {
    "exact": ("exact_blockwise", {"block": 500}),
    "favor_m128": ("performer_softmax", {"num_features": 128}),
    "favor_m2": ("performer_softmax", {"num_features": 2}),
    "relu": ("performer_relu", {"num_features": 128}),
    "elu_plus_one": ("linear", {}),
    "linformer": ("linformer", {"num_projections": 256}),
    "reformer": ("reformer", {}),
    "identity": ("identity", {}),
}
CLAIM_ROWS = ("exact", "favor_m128", "favor_m2", "relu", "identity")  # figures/listops.py's


def jobs(ctx):
  """The data, one train, eval and archive job per row and seed, then the figure ([] without a
  design)."""
  design = ctx.budget.listops
  if design is None:
    return []
  folder = os.path.join(ctx.runs, "data", "listops")
  out = [job_lib.Job(name=DATA, kind="data", study=STUDY,
                     outputs=(os.path.join(folder, "manifest.json"),),
                     command=("performer", "prepare-listops", "--out", folder,
                              *design.data_flags))]
  gin = tuple(map(repo, ("gin/listops/base.gin", *design.gin)))
  runs = []
  # Seed by seed through the claims' rows (CLAIM_ROWS), then the others: a study cut short has
  # the most seeds of what the claims compare.
  first = [r for r in design.rows if r in CLAIM_ROWS]
  order = [(row, seed) for rows in (first, [r for r in design.rows if r not in first])
           for seed in design.seeds for row in rows]
  for row, seed in order:
    attention, opts = ROWS[row]
    bindings = (f"DataConfig.path={folder!r}", f"ModelConfig.attention={attention!r}",
                f"TrainConfig.seed={seed}", *((options(**opts),) if opts else ()), *ctx.extra)
    runs.append(job_lib.train(f"{STUDY}_{row}_s{seed}", ctx.runs, gin, bindings, needs=(DATA,),
                              study=STUDY, settings={"task": "listops", "row": row, "seed": seed}))
  for r in runs:
    out += [r, *ctx.evaluated(r, ("test",), study=STUDY)]
  out.append(ctx.figure(STUDY, ("listops", "--runs", *map(ctx.archived, runs)), f"{STUDY}.png",
                        needs=[f"{j.name}_archive" for j in runs], study=STUDY))
  return out
