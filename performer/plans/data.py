"""The datasets the studies read: Swiss-Prot with Pfam labels for the OOD split, and PG-19 text.

A data job is done when its outputs exist: its commands check their own inputs."""

import os

from performer.plans.context import repo
from performer.plans.job import Job

STUDY = "data"


def jobs(ctx):
  if ctx.given_data:
    out = [Job(name="proteins", kind="data", command=(), study=STUDY,
               outputs=(os.path.join(ctx.data, "stats.json"),))]
  else:
    out = _proteins(ctx)
  stats = os.path.join(ctx.text_data, "stats.json")
  if ctx.budget.name == "paper":
    out.append(Job(name="pg19", kind="data", command=(), outputs=(stats,), study=STUDY))
  else:
    out.append(Job(name="pg19", kind="data", study=STUDY, outputs=(stats,),
                   command=("performer", "prepare-pg19", "--sample", "--out", ctx.text_data)))
  return out


def _proteins(ctx):
  out = []
  folder = os.path.dirname(ctx.data)
  if ctx.budget.sample_fasta:
    labels = os.path.join(folder, "labels.tsv.gz")
    survey = ("--sample", "300", "--ood-fraction", "0.05")
    fractions = ("--valid-fraction", "0.05", "--test-fraction", "0.05")
    needs = ()
  else:
    labels = os.path.join(folder, "swissprot-pfam", "labels.tsv.gz")
    survey = fractions = ()
    out.append(Job(name="swissprot", kind="data", study=STUDY, outputs=(ctx.fasta,),
                   command=("bash", repo("scripts/get_swissprot.sh"), ctx.fasta,
                            f"--{ctx.swissprot_route}")))
    needs = ("swissprot",)
  held_out = labels + ".held_out.txt"
  out.append(Job(name="pfam_labels", kind="data", study=STUDY, needs=needs,
                 outputs=(labels, held_out),
                 command=("performer", "label-pfam", ctx.fasta, "--gecco", *survey, "--out", labels)))
  out.append(Job(name="proteins", kind="data", study=STUDY, needs=("pfam_labels",),
                 outputs=(os.path.join(ctx.data, "stats.json"),),
                 command=("performer", "prepare-trembl", ctx.fasta, *fractions, "--families",
                          labels, "--ood-families", f"@{held_out}", "--out", ctx.data)))
  return out
