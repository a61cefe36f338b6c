"""Chapter 6 checks: their wrong answers live in the package table (fundamentallm/checks/ch06.py,
run by tests/test_catches.py); correct answers and stubs: tests/test_course.py. Here: the RMSNorm
Jacobian check's reference is the package's RMSNorm."""

import torch

from fundamentallm import checks


def test_the_rms_jacobian_reference_is_the_package_rmsnorm():
    from fundamentallm.norms import RMSNorm

    z = torch.randn(7, dtype=torch.float64)
    norm = RMSNorm(7, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(7, dtype=torch.float64))
    J = torch.autograd.functional.jacobian(norm, z)
    written = torch.autograd.functional.jacobian(
        lambda v: v / torch.sqrt(v.pow(2).mean() + 1e-5) * norm.weight.detach(), z)
    torch.testing.assert_close(J, written)


def test_the_rms_jacobian_check_passes_an_exact_answer_in_another_form():
    def rms_norm_jacobian(z, weight, eps=1e-5):
        C = z.shape[-1]
        ms = (z * z).sum() / C + eps
        return weight[:, None] * (torch.eye(C, dtype=z.dtype) * ms - z[:, None] * z[None, :] / C) / ms ** 1.5
    assert checks.check_rms_norm_jacobian(rms_norm_jacobian) is True
