"""Fig. 6 and Table 2 (Sec. 4.3): the protein language models, evaluated on test and OOD.

Staged: the scale gate's runs first, then further seeds only where a verdict can still change."""


from performer import attention
from performer.figures import claims, paper
from performer.plans import job as job_lib
from performer.plans.context import options

STUDY = "fig6"
SUMMARY = ("Fig. 6 / Table 2: eight protein models in (U) and (B) and an identity control per "
           "direction, test and OOD evals, tables")
# The paper's models per direction (figures.paper.FIG6), and the identity control of the gate.
MODELS = {d.lower(): (*map(attention.by_label, labels), "identity")
          for d, labels in paper.FIG6.items()}
REPLICATES = (0, 1, 2)
GATE = ("identity", "exact")  # every seed of these first: the scale gate reads them
GATE_FILE = "fig6_gate.md"  # figure claims of the gate's runs; its .json says passed or not
SEEDS_FILE = "fig6_seeds.md"  # figure claims of the REPLICATES' runs; its .json's "more_seeds"


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


def gates(ctx):
  """{direction: passed} from the gate file once it is written ({} before)."""
  return ctx.decision(GATE_FILE, lambda record: {d.lower(): g["passed"]
                                                 for d, g in record["gates"].items()})


def more_seeds(ctx):
  """{(direction, attention): seeds} the seeds decision asks for ({} before it is written)."""
  def read(record):
    out = {}
    for want in record["more_seeds"]:
      for name in want["attention"]:
        key = (want["direction"].lower(), name)
        out[key] = max(out.get(key, 0), min(int(want["seeds"]), claims.MOST_SEEDS))
    return out
  return ctx.decision(SEEDS_FILE, read)


def sweep(ctx, extra=True):
  """The runs' settings: every seed of the gate's models; of the others seed 0, and the later
  seeds only in a direction whose gate has passed (every seed when the budget is not staged);
  then, with `extra`, the seeds beyond REPLICATES that the seeds decision asks for."""
  passed = gates(ctx) if ctx.budget.staged else {d: True for d in MODELS}
  order = lambda name: GATE.index(name) if name in GATE else len(GATE)
  out = [dict(direction=d, attention=a, seed=seed)
         for stage in ("gate", "rest") for seed in REPLICATES
         for d, names in MODELS.items() for a in sorted(names, key=order)
         if (a in GATE) == (stage == "gate") and (a in GATE or not seed or passed.get(d))]
  wanted = more_seeds(ctx) if extra and ctx.budget.staged else {}
  out += [dict(direction=d, attention=a, seed=seed)
          for seed in range(len(REPLICATES), claims.MOST_SEEDS)
          for d, names in MODELS.items() for a in sorted(names, key=order)
          if wanted.get((d, a), 0) > seed]
  return out


def run_name(settings):
  return job_lib.replicate_name("{direction}_{attention}", settings)


def gate_runs(ctx):
  """Names of the scale gate's runs (every seed in REPLICATES of GATE's models)."""
  return [run_name(s) for s in sweep(ctx, extra=False) if s["attention"] in GATE]


def appendix_claims(ctx, study, runs, *, needs):
  """The `figure claims` job of an appendix study: its runs beside the scale gate's runs
  (which set each direction's gate and margin), into <results>/<study>_claims.md."""
  gate = gate_runs(ctx)
  return ctx.figure(f"{study}_claims", ("claims", "--runs", *map(ctx.archived, gate), *runs),
                    f"{study}_claims.md", needs=(*(f"{g}_archive" for g in gate), *needs),
                    study=study)


def jobs(ctx):
  out, archives = [], {}
  for s in sweep(ctx):
    name = run_name(s)
    train = ctx.protein(name, f"{s['direction']}_{s['attention']}",
                        attention_options(ctx, s["attention"]), seed=s["seed"], study=STUDY,
                        settings=s)
    evaluate, archive = ctx.evaluated(train, ("test", "ood"), study=STUDY)
    out += [train, evaluate, archive]
    archives[name] = (s, archive)
  gate = gate_runs(ctx)  # not the seeds a later decision adds: the gate stays as decided
  out.append(ctx.figure("fig6_gate", ("claims", "--runs", *map(ctx.archived, gate)), GATE_FILE,
                        needs=[archives[n][1].name for n in gate], study=STUDY))
  if ctx.budget.staged and gates(ctx):  # the REPLICATES' runs are all known once the gate is
    base = [run_name(s) for s in sweep(ctx, extra=False)]
    out.append(ctx.figure("fig6_seeds", ("claims", "--runs", *map(ctx.archived, base)),
                          SEEDS_FILE, needs=[archives[n][1].name for n in base], study=STUDY))
  runs = list(map(ctx.archived, archives))
  needs = [a.name for _, a in archives.values()]
  out.append(ctx.figure("table1", ("table1", "--input", ctx.data), "table1.md", needs=("proteins",),
                        study=STUDY))
  out.append(ctx.figure("fig9_aa_distribution", ("aa-distribution", "--input", ctx.data),
                        "fig9_aa_distribution.png", needs=("proteins",), study=STUDY))
  for name in ("table2", "claims"):
    out.append(ctx.figure(name, (name, "--runs", *runs), f"{name}.md", needs=needs, study=STUDY))
  for metric in ("accuracy", "perplexity"):
    out.append(ctx.figure(f"fig6_{metric}", ("curves", "--runs", *runs, "--metric", metric),
                          f"fig6_{metric}.png", needs=needs, study=STUDY))
  return out

