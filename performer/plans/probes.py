"""Probes without training: Fig. 2 (Lemma 2), Fig. 14 (error propagation), App. C.4 (attention).

Fig. 14 probes fig6's Transformers, App. C.4 its (B) Performer-softmax (on BPT1_BOVIN, P00974)."""

import importlib
import os

from performer.plans.job import Job

STUDY = "probes"
SUMMARY = "Fig. 2, Fig. 14, App. C.4: Lemma 2, error propagation, attention maps, BLOSUM62"
ACCESSION = "P00974"  # BPT1_BOVIN, App. C.4


def _probe(ctx, name, command, out, png, needs=()):
  """(the probe's job, the job drawing its result into results/<png>): its experiment's FIGURE."""
  probe = Job(name=name, kind="probe", command=("performer", *command, *ctx.budget.probe_args.get(
      name.removesuffix("_u").removesuffix("_b"), ()), "--out", out), needs=tuple(needs),
              outputs=(out,), study=STUDY)
  figure = importlib.import_module(f"performer.experiments.{command[0].replace('-', '_')}").FIGURE
  return probe, ctx.figure(png.removesuffix(".png"), (figure, "--input", out), png, needs=(name,),
                           study=STUDY)


def jobs(ctx):
  maps = os.path.join(ctx.runs, "probes", "attention_maps.json")
  softmax = ctx.workdir("b_performer_softmax")
  accession = "first-that-fits" if ctx.budget.sample_fasta else ACCESSION
  pairs = [_probe(ctx, "lemma2", ("lemma2",), ctx.result("lemma2.json"), "fig2_lemma2.png")]
  pairs += [_probe(ctx, f"error_propagation_{d}",
                   ("error-propagation", "--run", ctx.workdir(f"{d}_exact")),
                   ctx.result(f"error_propagation_{d}.json"), f"fig14_error_propagation_{d}.png",
                   needs=(f"{d}_exact",)) for d in "ub"]
  pairs.append(_probe(ctx, "attention_maps", ("attention-maps", "--run", softmax, "--fasta",
                                              ctx.fasta, "--accession", accession), maps,
                      "fig10_attention_maps.png", needs=("b_performer_softmax", "proteins")))
  pairs.append(_probe(ctx, "aa_similarity", ("aa-similarity", "--run", softmax, "--data", ctx.data),
                      ctx.result("aa_similarity.json"), "fig13_aa_similarity.png",
                      needs=("b_performer_softmax", "proteins")))
  return [probe for probe, _ in pairs] + [figure for _, figure in pairs]
