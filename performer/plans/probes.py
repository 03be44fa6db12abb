"""Probes without training: Fig. 2 (Lemma 2), Fig. 14 (error propagation), App. C.4 (attention).

Fig. 14 probes fig6's Transformers, App. C.4 its (B) Performer-softmax (on BPT1_BOVIN, P00974)."""

import importlib
import os

from performer.plans.job import Job

STUDY = "probes"
SUMMARY = "Fig. 2, Fig. 14, App. C.4: Lemma 2, error propagation, attention maps, BLOSUM62"
ACCESSION = "P00974"  # BPT1_BOVIN, App. C.4


def _probe(ctx, name, command, out, needs=()):
  return Job(name=name, kind="probe", command=("performer", *command, *ctx.budget.probe_args.get(
      name.removesuffix("_u").removesuffix("_b"), ()), "--out", out), needs=tuple(needs),
             outputs=(out,), study=STUDY)


def jobs(ctx):
  maps = os.path.join(ctx.runs, "probes", "attention_maps.json")
  softmax = ctx.workdir("b_performer_softmax")
  accession = "first-that-fits" if ctx.budget.sample_fasta else ACCESSION
  out = [_probe(ctx, "lemma2", ("lemma2",), ctx.result("lemma2.json"))]
  out += [_probe(ctx, f"error_propagation_{d}",
                 ("error-propagation", "--run", ctx.workdir(f"{d}_exact")),
                 ctx.result(f"error_propagation_{d}.json"), needs=(f"{d}_exact",)) for d in "ub"]
  out.append(_probe(ctx, "attention_maps", ("attention-maps", "--run", softmax, "--fasta", ctx.fasta,
                                            "--accession", accession), maps,
                    needs=("b_performer_softmax", "proteins")))
  out.append(_probe(ctx, "aa_similarity", ("aa-similarity", "--run", softmax, "--data", ctx.data),
                    ctx.result("aa_similarity.json"), needs=("b_performer_softmax", "proteins")))
  pngs = {"lemma2": "fig2_lemma2.png", "error_propagation_u": "fig14_error_propagation_u.png",
          "error_propagation_b": "fig14_error_propagation_b.png",
          "attention_maps": "fig10_attention_maps.png", "aa_similarity": "fig13_aa_similarity.png"}
  for probe in list(out):
    png, command = pngs[probe.name], probe.command[1].replace("-", "_")
    figure = importlib.import_module(f"performer.experiments.{command}").FIGURE  # what draws it
    out.append(ctx.figure(png.removesuffix(".png"), (figure, "--input", probe.outputs[0]), png,
                          needs=(probe.name,), study=STUDY))
  return out
