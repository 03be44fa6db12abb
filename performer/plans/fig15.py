"""Fig. 15 (redrawing): Performer-softmax with W redrawn and never redrawn, three seeds of W.

The seeds are the feature draw's (attention_options seed), not the weights'."""

from performer.plans import fig6
from performer.plans import job as job_lib
from performer.plans.context import options, short

STUDY = "fig15"
SUMMARY = "Fig. 15: feature redrawing on and off, three seeds of the random features"
FEATURE_SEEDS = (1, 2, 3)
SCHEDULES = {"redraw": "u_performer_softmax", "no_redraw": "u_performer_softmax_no_redraw"}


def jobs(ctx):
  budget = ctx.budget
  out = []
  for settings in job_lib.product(feature_seed=FEATURE_SEEDS, schedule=tuple(SCHEDULES)):
    redraw_every = budget.redraw_every if settings["schedule"] == "redraw" else 0
    out.append(ctx.protein(
        job_lib.run_name("fig15_{schedule}_f{feature_seed}", settings), SCHEDULES[settings["schedule"]],
        (*short(budget.redraw_steps), options(num_features=budget.num_features,
                                              redraw_every=redraw_every,
                                              seed=settings["feature_seed"])),
        study=STUDY, settings=settings))
  trains = list(out)
  out += [j for t in trains for j in ctx.evaluated(t, ("test",), study=STUDY)]
  # Every (U) softmax and ReLU replicate of Fig. 6: the text cites their seed means.
  right = [fig6.run_name(s) for s in fig6.sweep(ctx)
            if s["direction"] == "u" and s["attention"] in ("performer_softmax", "performer_relu")]
  runs = list(map(ctx.archived, trains))
  needs = [f"{j.name}_archive" for j in trains]
  out.append(ctx.figure("fig15_redraw", ("redraw", "--runs", *runs, *map(ctx.archived, right)),
                        "fig15_redraw.png", needs=[*needs, *(f"{m}_archive" for m in right)],
                        study=STUDY))
  out.append(fig6.appendix_claims(ctx, STUDY, runs, needs=needs))
  return out
