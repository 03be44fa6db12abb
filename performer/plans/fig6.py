"""Fig. 6 and Table 2 (Sec. 4.3): the protein language models, evaluated on test and OOD.

(U) Transformer, Performer-softmax, Performer-ReLU, Reformer; (B) Transformer,
Performer-softmax, Performer-ReLU, Linformer; in both directions the identity
attention control of the verdicts' scale gate (performer/verdicts.py). Each
model has REPLICATES seeds (a seed varies initialisation, dropout, data order
and random features): the verdicts need two at least, and three give the
seed variance a few degrees of freedom. The controls come first in each seed,
so the gate can be read before the rest finishes. Then Table 1, Table 2, the
claims and the Fig. 6 curves.
"""

from performer import attention
from performer.plans import job as job_lib
from performer.plans.context import options

STUDY = "fig6"
SUMMARY = ("Fig. 6 / Table 2: eight protein models in (U) and (B) and an identity control per "
           "direction, test and OOD evals, tables")
MODELS = {"u": ("exact", "performer_relu", "performer_softmax", "reformer", "identity"),
          "b": ("exact", "performer_relu", "performer_softmax", "linformer", "identity")}
REPLICATES = (0, 1, 2)


def attention_options(ctx, name):
  """The budget's options of one backend: its m, Linformer's k, the Reformer's buckets."""
  budget, defaults = ctx.budget, attention.info(name).defaults
  if "num_features" in defaults:
    return (options(num_features=budget.num_features),)
  if "num_projections" in defaults:
    return (options(num_projections=budget.num_projections),)
  if "n_buckets" in defaults and budget.reformer_options:
    return (options(**budget.reformer_options),)
  return ()


def jobs(ctx):
  sweep = [dict(direction=d, attention=a, seed=seed) for seed in REPLICATES
           for d, names in MODELS.items()
           for a in sorted(names, key=lambda name: name != "identity")]  # controls first
  out, evals = [], []
  for s in sweep:
    name = job_lib.run_name("{direction}_{attention}" + ("_seed{seed}" if s["seed"] else ""), s)
    out.append(ctx.protein(name, f"{s['direction']}_{s['attention']}",
                           attention_options(ctx, s["attention"]), seed=s["seed"], study=STUDY,
                           settings=s))
    workdir = ctx.workdir(name)
    evals.append(job_lib.Job(
        name=f"{name}_eval", kind="eval", study=STUDY, needs=(name,),
        command=("performer", "eval", "--workdir", workdir, "--split", "test,ood"),
        outputs=tuple(f"{workdir}/eval_{split}{suffix}" for split in ("test", "ood")
                      for suffix in (".json", "_sequences.npz"))))
  out += evals
  runs = [ctx.workdir(e.needs[0]) for e in evals]
  needs = [e.name for e in evals]
  out.append(ctx.figure("table1", ("table1", "--input", ctx.data), "table1.md", needs=("proteins",),
                        study=STUDY))
  for name in ("table2", "claims"):
    out.append(ctx.figure(name, (name, "--runs", *runs), f"{name}.md", needs=needs, study=STUDY))
  for metric in ("accuracy", "perplexity"):
    out.append(ctx.figure(f"fig6_{metric}", ("curves", "--runs", *runs, "--metric", metric),
                          f"fig6_{metric}.png", needs=needs, study=STUDY))
  return out
