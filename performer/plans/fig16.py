"""Fig. 16 (App. D.3): (B) generalized attention with kernel f; trig is the paper's cosine.

Each run is evaluated on test (per-sequence sums) and archived; the figure
and the claims table (fig16_claims.md) read the archives.
"""

from performer.plans import job as job_lib
from performer.plans.context import options, short

STUDY = "fig16"
SUMMARY = "Fig. 16: (B) generalized attention with eight kernel functions"
KERNELS = ("sigmoid", "exp", "relu", "abs", "gelu", "trig", "tanh", "identity")


def jobs(ctx):
  budget = ctx.budget
  out = [ctx.protein(job_lib.run_name("fig16_{kernel}", settings), "b_performer_kernels",
                     (*short(budget.kernel_steps),
                      options(num_features=budget.num_features, redraw_every=budget.redraw_every,
                              kernel=settings["kernel"])),
                     study=STUDY, settings=settings)
         for settings in job_lib.product(kernel=KERNELS)]
  trains = list(out)
  out += [j for t in trains for j in ctx.evaluated(t, ("test",), study=STUDY)]
  runs, needs = list(map(ctx.archived, trains)), [f"{j.name}_archive" for j in trains]
  out.append(ctx.figure("fig16_kernels", ("kernels", "--runs", *runs), "fig16_kernels.png",
                        needs=needs, study=STUDY))
  out.append(ctx.claims(STUDY, runs, needs=needs))
  return out
