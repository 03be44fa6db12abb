"""Fig. 17 (App. D.3): Fig. 16's kernels at 4x the batch and the same steps (4x4 against 2x2 TPUs).

Its table ranks the kernels at both batches and decides how far the ranking moves."""

from performer import configurables
from performer.errors import UserError
from performer.plans import fig16
from performer.plans import job as job_lib

STUDY = "fig17"
SUMMARY = "Fig. 17: Fig. 16's kernels at 4x the batch; the kernel ranking at both batches"
# Declared 2026-12-07, before its runs: the paper's 4x4 TPU-v2 against Fig. 16's 2x2, at 128
# sequences per device, is 4x the batch; the steps stay.
BATCH_FACTOR = 4
SEEDS = (0, 1, 2)  # the rule's floor, as Fig. 16's rows it is ranked against


def base_batch(job):
  """DataConfig.batch_size that a train job resolves to (its gin files and bindings), or None
  for a configuration that does not resolve: plans.resolve then names the job and the error."""
  try:
    configurables.parse(list(job.gin), list(job.bindings))
    return configurables.settings()["data"]["batch_size"]
  except UserError:
    return None


def sweep():
  """Every Fig. 16 kernel at each seed, renormalized (the rows Fig. 16 ranks)."""
  return job_lib.product(kernel=fig16.KERNELS, seed=SEEDS)


def jobs(ctx):
  batch = base_batch(fig16.train(ctx, "fig16_relu", {"kernel": "relu"}))
  larger = (f"DataConfig.batch_size={BATCH_FACTOR * batch}",) if batch else ()
  trains = [fig16.train(ctx, job_lib.replicate_name("fig17_{kernel}", s),
                        {**s, "batch_factor": BATCH_FACTOR}, larger, study=STUDY)
            for s in sweep()]
  out = list(trains)
  out += [j for t in trains for j in ctx.evaluated(t, ("test",), study=STUDY)]
  large, small = list(map(ctx.archived, trains)), [ctx.archived(fig16.name(s)) for s in sweep()]
  needs = [f"{j.name}_archive" for j in trains]
  out.append(ctx.figure("fig17_kernels", ("kernels", "--runs", *large), "fig17_kernels.png",
                        needs=needs, study=STUDY))
  out.append(ctx.figure("fig17_ranking", ("kernel-ranking", "--runs", *small, *large),
                        "fig17_ranking.md",
                        needs=[*(f"{fig16.name(s)}_archive" for s in sweep()), *needs],
                        study=STUDY))
  return out
