"""Fig. 7 right: concatenated proteins, small exact Transformers of 1-3 layers against a Performer.

Identity attention in the Performer's config gives the control line."""

from performer.plans import job as job_lib
from performer.plans.context import options, short

STUDY = "fig7"
SUMMARY = "Fig. 7 right: concatenated proteins, 1-3 layer Transformers against Performer-ReLU"
LAYERS = (1, 2, 3)


def jobs(ctx):
  budget = ctx.budget
  sized = (*budget.concat_bindings, *short(budget.concat_steps))
  out = []
  for settings in job_lib.product(attention=("exact",), layers=LAYERS):
    out.append(ctx.protein(
        job_lib.run_name("fig7_exact_{layers}l", settings),
        job_lib.run_name("concat_u_exact_{layers}l", settings),
        (*sized, f"ModelConfig.num_layers={settings['layers']}", "ModelConfig.num_heads=8",
         "ModelConfig.d_model=256", "ModelConfig.d_ff=256"),
        study=STUDY, settings=settings))
  out.append(ctx.protein("fig7_performer_relu", "concat_u_performer_relu",
                         (*sized, options(num_features=budget.num_features)), study=STUDY,
                         settings={"attention": "performer_relu"}))
  out.append(ctx.protein("fig7_identity", "concat_u_performer_relu",
                         (*sized, "ModelConfig.attention='identity'"), study=STUDY,
                         settings={"attention": "identity"}))  # the control line
  trains = list(out)
  # test evals give the figure its empirical-baseline line; then each run is archived
  out += [a for j in trains for a in ctx.evaluated(j, ("test",), study=STUDY)]
  out.append(ctx.figure("fig7_concat_accuracy",
                        ("curves", "--runs", *map(ctx.archived, trains), "--metric", "accuracy"),
                        "fig7_concat_accuracy.png", needs=[f"{j.name}_archive" for j in trains],
                        study=STUDY))
  return out
