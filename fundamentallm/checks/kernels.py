"""torch's kernels under their other names (``torch._softmax``, ``torch.ops.aten.*``), refused
beside the public names by the checks of chapters 2 and 3 (list them before the public names: a
later name's aliases take its label)."""

import torch

SOFTMAX_KERNELS = tuple(f"torch.{n}" for n in ("_softmax", "_log_softmax", "_safe_softmax") if hasattr(torch, n)) \
    + tuple(f"torch.ops.aten.{n}" for n in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
                                            "special_softmax") if hasattr(torch.ops.aten, n))
ATEN_ATTENTION = tuple(f"torch.ops.aten.{n}" for n in (
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_attention_math_for_mps", "_native_multi_head_attention")
    if hasattr(torch.ops.aten, n))
