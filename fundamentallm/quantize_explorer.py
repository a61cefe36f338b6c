"""Chapter 17's explorer: what rounding weights to a few bits does to a real weight matrix.

:func:`quantization_explorer` takes a model's linear layer; the reader picks the bits, the group
size (one scale per row or per ``group_size`` inputs) and symmetric or asymmetric codes. Left:
the first weights of a row and the values they are rounded to (the grid of the first group).
Right: the relative error of the whole matrix against the bits, one line per group size, with the
bits each weight costs once the float16 scales (and uint8 zero points) are counted. It is a module
of its own, next to :mod:`fundamentallm.explorers` (chapters 2-14), built the same way.
"""

from __future__ import annotations

import torch

from .interactive import Explorer, choice, slider
from .quantize import dequantize, quantize

GROUPS = ("row", 128, 64, 32, 16, 8)


def _bits_per_weight(bits: int, group: int, symmetric: bool) -> float:
    """Code bits plus the group's float16 scale (and uint8 zero point), shared by its weights."""
    return bits + (16 + (0 if symmetric else 8)) / group


def quantization_explorer(model, layer: str | None = None, shown: int = 32) -> Explorer:
    """Quantize one ``nn.Linear`` of ``model`` (``layer``: its name; the first one by default) at any
    bits, group size and symmetry; ``shown`` weights of its first row are drawn."""
    import matplotlib.pyplot as plt

    linears = {n: m for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n != "lm_head"}
    if not linears:
        raise ValueError("the model has no nn.Linear layer to quantize (lm_head aside)")
    name = layer or next(iter(linears))
    if name not in linears:
        raise ValueError(f"layer={layer!r} is not a linear layer of the model; choose one of "
                         f"{sorted(linears)}")
    w = linears[name].weight.detach().float().cpu()
    groups = [g for g in GROUPS if g == "row" or (w.shape[1] % g == 0 and g < w.shape[1])]
    norm, errors = w.norm().item(), {}

    def error(bits, group, symmetric) -> float:
        if (bits, group, symmetric) not in errors:  # the frames share their curves: each computed once
            q, s, z = quantize(w, bits, None if group == "row" else group, symmetric)
            errors[bits, group, symmetric] = (dequantize(q, s, z) - w).norm().item() / norm
        return errors[bits, group, symmetric]

    def draw(bits, group, codes):
        symmetric = codes == "symmetric"
        size = w.shape[1] if group == "row" else group
        q, s, z = quantize(w, bits, None if group == "row" else group, symmetric)
        rebuilt = dequantize(q, s, z)
        fig, (a0, a1) = plt.subplots(1, 2, figsize=(10.5, 3.4))
        n = min(shown, w.shape[1])
        zero = 0.0 if z is None else z[0, 0].item()
        levels = (torch.arange(-(2 ** (bits - 1) - 1), 2 ** (bits - 1)) if symmetric
                  else torch.arange(0, 2 ** bits)).float()
        for level in ((levels - zero) * s[0, 0]).tolist():
            a0.axhline(level, color="0.85", lw=0.6)
        a0.plot(range(n), w[0, :n], "o", ms=4, label="weight")
        a0.plot(range(n), rebuilt[0, :n], "x", ms=5, color="C3", label="after rounding")
        a0.set(title=f"{name}, row 0: {n} of {w.shape[1]} weights (grid: group 0)",
               xlabel="input", ylabel="value")
        a0.legend(fontsize=7)
        sweep = list(range(2, 9))
        for g in groups:
            label = f"groups of {g}" if g != "row" else "one scale per row"
            a1.plot(sweep, [error(b, g, symmetric) for b in sweep], "o-" if g == group else "-",
                    ms=4, lw=2 if g == group else 1, label=label)
        err = error(bits, group, symmetric)
        a1.plot([bits], [err], "k*", ms=12)
        cost = _bits_per_weight(bits, size, symmetric)
        a1.set(yscale="log", xlabel="bits per code", ylabel="||W_hat - W|| / ||W||",
               title=f"error {err:.4f} at {cost:.2f} bits per weight ({codes})")
        a1.legend(fontsize=7)
        a1.grid(alpha=0.3)
        fig.tight_layout()
        return fig

    value = 32 if 32 in groups else "row"
    return Explorer({"bits": slider(2, 8, 1, 4, frames=[4, 8]),
                     "group": choice(groups, value=value, frames=sorted({"row", value}, key=str)),
                     "codes": choice(["symmetric", "asymmetric"])}, draw,
                    alt="Left: the first weights of a row and their rounded values on the "
                        "quantization grid. Right: the relative error of the weight matrix against "
                        "the bits per code, one line per group size",
                    title="Quantization error against bits and group size")
