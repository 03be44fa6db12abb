"""Fig. 4: MSE of FAVOR attention against m, from an approx-error result file."""

import matplotlib.pyplot as plt

from performer import favor
from performer.figures.io import check_figure_path, figure_format, load_rows, save_figure

NAME = "mse-vs-m"  # performer figure NAME
SUMMARY = "Fig. 4 MSE of FAVOR attention against m (--input approx-error JSON)"

REQUIRED = {"kernel": str, "projection": str, "scaling": str, "m": float, "mse_mean": float,
            "mse_std": float, "mse_median": float, "samples": float, "input_scale": float}

STYLES = {"orthogonal": "-", "iid": "--", "hadamard": ":", "givens": "-.", "simplex": (0, (5, 1))}
NAMES = {"orthogonal": "ORF", "iid": "IID", "hadamard": "H-ORF", "givens": "G-ORF",
         "simplex": "SimRF"}
PREFERENCE = ("orthogonal", "iid", "hadamard", "givens", "simplex")  # a kernel's right-panel curve


def _kernel_panel(variants):
  """The right panel's variants: one chi projection per kernel, and every other scaling.

  Returns (variants, title suffix naming the projections compared).
  """
  chosen = []
  for kernel in sorted({v[0] for v in variants}):
    kinds = sorted((v[1] for v in variants if v[0] == kernel and v[2] == "chi"),
                   key=lambda k: (PREFERENCE + (k,)).index(k))
    if kinds:
      chosen.append((kernel, kinds[0], "chi"))
  kinds = {v[1] for v in chosen}
  suffix = (f" ({NAMES.get(kinds.pop(), '?')})" if len(kinds) == 1
            else " (projections as labelled)" if kinds else "")
  return sorted(chosen + [v for v in variants if v[2] != "chi"]), suffix


def _projection_panel(variants):
  """The left panel's variants: every chi projection of each kernel that has several.

  Returns (variants, title naming the projections compared); no variants
  when no kernel has two.
  """
  chi = [v for v in variants if v[2] == "chi"]
  chosen = [v for v in chi if sum(w[0] == v[0] for w in chi) > 1]
  kinds = sorted({v[1] for v in chosen}, key=lambda k: (PREFERENCE + (k,)).index(k))
  return chosen, "Projections " + " vs ".join(NAMES.get(k, k) for k in kinds)


def _colour(kernel):
  """The kernel's colour (favor.kernel); grey for a name the registry does not know."""
  return favor.kernel(kernel).colour if kernel in favor.KERNELS else "0.5"


def _label(variant):
  """The legend of (kernel, projection, scaling): the kernel's label (favor.kernel), its ORF /
  IID / ... name, and SMREG where the rows are scaled to |w| = sqrt(d)."""
  kernel, kind, scaling = variant
  name = favor.kernel(kernel).label if kernel in favor.KERNELS else kernel
  return f"{name}, {NAMES.get(kind, kind)}" + (", SMREG (|w| = sqrt(d))" if scaling == "sqrt_d"
                                                 else "")


def render(input_path, out_path):
  """Reads an approx_error JSON file and writes the figure to out_path (PNG).

  Raises:
    UserError: the file is missing, not JSON, not an approx_error result, or
      lacks the columns above.
  """
  figure_format(out_path)  # a wrong extension fails first
  _, rows = load_rows(input_path, "approx_error", REQUIRED)
  check_figure_path(out_path)  # before drawing, not after
  scales = sorted({r["input_scale"] for r in rows})
  variants_at = {s: sorted({(r["kernel"], r["projection"], r["scaling"]) for r in rows
                            if r["input_scale"] == s}) for s in scales}
  left = any(_projection_panel(v)[0] for v in variants_at.values())
  fig, axes = plt.subplots(len(scales), 1 + left, figsize=(7 + 7 * left, 3.6 * len(scales)),
                           squeeze=False, layout="constrained")
  for row_axes, scale in zip(axes, scales):
    at_scale = [r for r in rows if r["input_scale"] == scale]
    kernels, suffix = _kernel_panel(variants_at[scale])
    projections, projection_title = _projection_panel(variants_at[scale])
    names = sorted({v[0] for v in kernels})
    title = (" vs ".join(names).capitalize() + " features" if len(names) <= 3
             else "Estimators") + suffix
    panels = [(row_axes[-1], title, kernels)]
    if left:
      panels.insert(0, (row_axes[0], projection_title, projections))
    for ax, title, shown in panels:
      for variant in shown:
        curve = sorted((r for r in at_scale if (r["kernel"], r["projection"], r["scaling"]) == variant),
                       key=lambda r: r["m"])
        label, colour = _label(variant), _colour(variant[0])
        style = STYLES.get(variant[1], "-") if variant[2] == "chi" else (0, (3, 1, 1, 1))
        m = [r["m"] for r in curve]
        mean = [r["mse_mean"] for r in curve]
        high = [max(r["mse_std"], 0.0) for r in curve]
        low = [min(h, 0.9 * abs(r["mse_mean"])) for h, r in zip(high, curve)]  # log axis: > 0
        ax.errorbar(m, mean, yerr=[low, high], color=colour,
                    linestyle=style, marker="o", markersize=3, capsize=2, label=label)
        ax.plot(m, [r["mse_median"] for r in curve], linestyle="none", marker="o",
                markerfacecolor="none", color=colour, markersize=6)
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_xlabel("number of random features m")
      ax.set_ylabel("MSE of attention output")
      first = at_scale[0]
      norm = first.get("query_norm_mean")
      norms = f", |x| ~ {norm:.2f}" if isinstance(norm, (int, float)) else ""
      ax.set_title(f"{title}: input scale {scale:g}{norms}", fontsize=10)
      ax.grid(True, which="both", alpha=0.3)
      if shown:  # beside the panel: inside, it covers curves
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
  r0 = rows[0]
  samples = f"{r0['samples']} sample" + ("s" if r0["samples"] != 1 else "")
  anisotropy = r0.get("anisotropy", 1.0)
  inputs = f", anisotropic inputs r={anisotropy:g}" if anisotropy != 1.0 else ""
  fig.suptitle(f"FAVOR vs exact softmax attention, L={r0.get('L')}, d={r0.get('d')}{inputs}, "
               f"{samples} (mean, +-1 std; hollow: median)", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
