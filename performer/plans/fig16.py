"""Fig. 16 (App. D.3): (B) generalized attention with kernel f, with and without D^-1.

trig is the paper's cosine; identity attention in the same config gives the control line."""

from performer.plans import fig6
from performer.plans import job as job_lib
from performer.plans.context import options, short

STUDY = "fig16"
SUMMARY = "Fig. 16: (B) generalized attention with eight kernel functions"
KERNELS = ("sigmoid", "exp", "relu", "abs", "gelu", "trig", "tanh", "identity")
COMPARED, REPLICATES = ("relu", "trig"), (1, 2)  # seeds beyond 0 of the claim's kernels
# D.3's renormalization on/off (declared 2026-12-07): the kernels whose features need no
# stabilising constant (numerics.check_renormalize), each off and on at seeds 0-2.
BOUNDED = ("sigmoid", "relu", "abs", "gelu", "tanh", "identity")
UNNORMALISED = {"renormalize": False}
# Fig. 17's ranking (declared 2026-12-07) compares every kernel at seeds 0-2: exp is the one
# kernel the rows above leave at one seed.
RANKED_ONLY = ("exp",)


def sweep():
  """Each kernel's seed 0 (its settings have no seed: the runs before the replicates keep their
  names and fingerprints), the replicates of COMPARED, then the renormalization rows: BOUNDED
  without D^-1 at seeds 0-2 and the seeds 1-2 with it that COMPARED lacks, then exp's seeds
  1-2 for Fig. 17's ranking."""
  return [*job_lib.product(kernel=KERNELS), *job_lib.product(kernel=COMPARED, seed=REPLICATES),
          *({**s, **UNNORMALISED} for s in job_lib.product(kernel=BOUNDED, seed=(0, *REPLICATES))),
          *job_lib.product(kernel=[k for k in BOUNDED if k not in COMPARED], seed=REPLICATES),
          *job_lib.product(kernel=RANKED_ONLY, seed=REPLICATES)]


def name(settings):
  """The run name of a sweep setting: fig16_<kernel>[_no_renorm][_seed<s>]."""
  template = "fig16_{kernel}" + ("_no_renorm" if settings.get("renormalize") is False else "")
  return job_lib.replicate_name(template, settings)


def train(ctx, name, settings, bindings=(), *, study=STUDY):
  """The train job of one kernel run: (B) generalized attention with settings' kernel (and
  renormalize, seed) at this budget's Fig. 16 steps, `bindings` last."""
  budget = ctx.budget
  return ctx.protein(name, "b_performer_kernels",
                     (*short(budget.kernel_steps),
                      options(num_features=budget.num_features, redraw_every=budget.redraw_every,
                              kernel=settings["kernel"],
                              **({} if settings.get("renormalize", True) else UNNORMALISED)),
                      *bindings),
                     seed=settings.get("seed", 0), study=study, settings=settings)


def jobs(ctx):
  budget = ctx.budget
  out = [train(ctx, name(settings), settings) for settings in sweep()]
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
