"""Fig. 5 (backward compatibility): trained Transformers fine-tuned with other attention.

Fine-tunes fig6's (U) and (B) Transformers; the paper's PG-19 panel here uses the sample book."""

from performer.plans import fig6
from performer.plans import job as job_lib
from performer.plans.context import options, short

STUDY = "fig5"
SUMMARY = "Fig. 5: Transformers fine-tuned as Performers (proteins and text)"
# variant -> (the config's attention part, its attention options beyond m and the redraw period)
VARIANTS = {
    "exact": ("exact", None),
    "positive": ("performer_softmax", {}),
    "no_redraw": ("performer_softmax_no_redraw", {"redraw_every": 0}),
    "trig": ("performer_softmax", {"kernel": "trig"}),
    "smreg": ("performer_softmax", {"scaling": "sqrt_d"}),
    "linformer": ("linformer", None),
}
PROTEIN = {"u": ("exact", "positive", "no_redraw", "trig", "smreg"),
           "b": ("exact", "positive", "linformer")}
TEXT = ("exact", "positive", "no_redraw", "trig", "smreg")
TEXT_SOURCE = "fig5_text_source"
REPLICATES = (1, 2)  # seeds beyond 0 of the protein fine-tunes (seed 0's settings have none)


def _options(ctx, variant):
  attention, extra = VARIANTS[variant]
  if attention == "linformer":
    return (options(num_projections=ctx.budget.num_projections),)
  if extra is None:
    return ()
  return (options(**{"num_features": ctx.budget.num_features,
                     "redraw_every": ctx.budget.redraw_every, **extra}),)


def _from(ctx, source, steps):
  return (f"TrainConfig.init_from={ctx.workdir(source)!r}", *short(steps))


def jobs(ctx):
  out = []
  for seed in (0, *REPLICATES):
    for direction, variants in PROTEIN.items():
      source = f"{direction}_exact"
      for variant in variants:
        settings = {"direction": direction, "source": source, "variant": variant}
        settings |= {"seed": seed} if seed else {}
        out.append(ctx.protein(
            job_lib.replicate_name("fig5_{direction}_{variant}", settings),
            f"{direction}_{VARIANTS[variant][0]}",
            (*_from(ctx, source, ctx.budget.finetune_steps), *_options(ctx, variant)),
            seed=seed, needs=(source,), study=STUDY, settings=settings))
  out.append(ctx.text(TEXT_SOURCE, "pg19_u_exact", study=STUDY,
                      settings={"direction": "u", "variant": "source"}))
  for variant in TEXT:
    settings = {"direction": "u", "source": TEXT_SOURCE, "variant": variant}
    config = "pg19_u_exact" if variant == "exact" else "pg19_u_performer_softmax_from_exact"
    out.append(ctx.text(
        job_lib.run_name("fig5_text_{variant}", settings), config,
        (*_from(ctx, TEXT_SOURCE, ctx.budget.text_finetune_steps), *_options(ctx, variant)),
        needs=(TEXT_SOURCE,), study=STUDY, settings=settings))
  trains = list(out)
  protein = [j for j in trains if j.settings.get("source") in ("u_exact", "b_exact")]
  out += [j for t in trains
          for j in ctx.evaluated(t, ("test",) if t in protein else (), study=STUDY)]
  tuned = [j for j in trains if j.name != TEXT_SOURCE]  # every seed: the figure's bands
  out.append(ctx.figure("fig5_backward_compat",
                        ("backward-compat", "--runs", *map(ctx.archived, tuned)),
                        "fig5_backward_compat.png",
                        needs=[f"{j}_archive" for j in (*(t.name for t in tuned), "u_exact",
                                                        "b_exact", TEXT_SOURCE)],
                        study=STUDY))  # the sources' archives: its grey line
  out.append(ctx.figure("fig15_trig_full", ("trig-full", "--runs", *map(ctx.archived, tuned)),
                        "fig15_trig_full.png", needs=[f"{t.name}_archive" for t in tuned],
                        study=STUDY))  # Fig. 15 right: Fig. 5 zoomed out
  out.append(fig6.appendix_claims(ctx, STUDY, list(map(ctx.archived, protein)),
                        needs=[f"{j.name}_archive" for j in protein]))
  return out
