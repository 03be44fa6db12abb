"""Fig. 16 (App. D.3): (B) generalized attention with kernel f; trig is the paper's cosine.

Identity attention in the same config gives the figure's control line."""

from performer.plans import fig6
from performer.plans import job as job_lib
from performer.plans.context import options, short

STUDY = "fig16"
SUMMARY = "Fig. 16: (B) generalized attention with eight kernel functions"
KERNELS = ("sigmoid", "exp", "relu", "abs", "gelu", "trig", "tanh", "identity")
COMPARED, REPLICATES = ("relu", "trig"), (1, 2)  # seeds beyond 0 of the claim's kernels


def sweep():
  """Each kernel's seed 0 (its settings have no seed: the runs before the replicates keep their
  names and fingerprints), then the replicates of COMPARED."""
  return [*job_lib.product(kernel=KERNELS), *job_lib.product(kernel=COMPARED, seed=REPLICATES)]


def jobs(ctx):
  budget = ctx.budget
  out = [ctx.protein(job_lib.replicate_name("fig16_{kernel}", settings), "b_performer_kernels",
                     (*short(budget.kernel_steps),
                      options(num_features=budget.num_features, redraw_every=budget.redraw_every,
                              kernel=settings["kernel"])),
                     seed=settings.get("seed", 0), study=STUDY, settings=settings)
         for settings in sweep()]
  # The control line: identity attention in the same config and steps (not a claim's model).
  control = ctx.protein("fig16_control", "b_performer_kernels",
                        (*short(budget.kernel_steps), "ModelConfig.attention='identity'",
                         "ModelConfig.attention_options={}"),
                        study=STUDY, settings={"control": "identity"})
  trains = list(out)
  out.append(control)
  out += [j for t in (*trains, control) for j in ctx.evaluated(t, ("test",), study=STUDY)]
  runs, needs = list(map(ctx.archived, trains)), [f"{j.name}_archive" for j in trains]
  out.append(ctx.figure("fig16_kernels", ("kernels", "--runs", *runs, ctx.archived(control)),
                        "fig16_kernels.png", needs=[*needs, f"{control.name}_archive"],
                        study=STUDY))
  out.append(fig6.appendix_claims(ctx, STUDY, runs, needs=needs))
  return out
