"""Fig. 16 (App. D.3): (B) generalized attention with kernel f; trig is the paper's cosine."""

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
  out.append(ctx.figure("fig16_kernels", ("kernels", "--runs", *(j.workdir for j in out)),
                        "fig16_kernels.png", needs=[j.name for j in out], study=STUDY))
  return out
