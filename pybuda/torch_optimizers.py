"""The torch golden twins of the pybuda optimizers whose rule ``torch.optim`` lacks: Adam without bias
correction, LAMB (You et al. 2019) and LARS (You et al. 2017), written from the published rules.

:meth:`pybuda.optimizers.Optimizer.get_pytorch_optimizer` returns them (for CPU-fallback parameters and for
verification); they are written independently of the update graphs so that each checks the other.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

__all__ = ["TorchAdamNoBiasCorrection", "TorchLAMB", "TorchLARS"]


def _twin_defaults(owner: str, lr: float, betas: Optional[Tuple[float, float]] = None) -> None:
    # The same argument checks as the pybuda optimizers (imported here: pybuda.optimizers imports this module).
    from pybuda.optimizers import _beta, _check_lr

    _check_lr(owner, lr)
    if betas is not None:
        _beta(owner, "beta1", betas[0])
        _beta(owner, "beta2", betas[1])


class TorchAdamNoBiasCorrection(torch.optim.Optimizer):
    """Adam without bias correction: ``w ← w − lr·m/(√v+ε)``; ``weight_decay`` is L2 (added to the
    gradient) or, with ``decoupled``, AdamW-style (``w ← w − lr·wd·w`` as well)."""

    def __init__(self, params, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled: bool = False):
        _twin_defaults("TorchAdamNoBiasCorrection", lr, betas)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=decoupled))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if group["weight_decay"] and not group["decoupled"]:
                    g = g + group["weight_decay"] * p
                st = self.state[p]
                if not st:
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                m, v = st["exp_avg"], st["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                if group["weight_decay"] and group["decoupled"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.addcdiv_(m, v.sqrt().add_(group["eps"]), value=-group["lr"])
        return loss


class TorchLAMB(torch.optim.Optimizer):
    """LAMB as published (You et al. 2019): Adam direction plus decoupled weight decay, scaled by the
    layer-wise trust ratio ``clip(‖w‖, lo, hi) / ‖update‖`` (1 when either norm is zero)."""

    def __init__(self, params, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, correction: bool = False, clip_value: Tuple[float, float] = (0.0, 10.0)):
        _twin_defaults("TorchLAMB", lr, betas)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      correction=correction, clip_value=tuple(clip_value)))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lo, hi = group["clip_value"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                m, v = st["exp_avg"], st["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat, v_hat = m, v
                if group["correction"]:
                    m_hat = m / (1 - b1 ** st["step"])
                    v_hat = v / (1 - b2 ** st["step"])
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update = update + group["weight_decay"] * p
                w_norm = torch.linalg.vector_norm(p).clamp(lo, hi)
                u_norm = torch.linalg.vector_norm(update)
                trust = w_norm / u_norm if (w_norm > 0 and u_norm > 0) else torch.ones((), dtype=p.dtype)
                p.sub_(group["lr"] * trust * update)
        return loss


class TorchLARS(torch.optim.Optimizer):
    """LARS as published (You et al. 2017): layer-wise ``local_lr = η·‖w‖ / (‖g‖ + wd·‖w‖ + ε)`` (1 when
    either norm is zero) scales ``g + wd·w``; then SGD momentum (dampening, Nesterov) with ``lr``."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.9, nesterov: bool = False,
                 dampening: float = 0.0, weight_decay: float = 0.01, lars_coeff: float = 1e-3, eps: float = 1e-8):
        _twin_defaults("TorchLARS", lr)
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, dampening=dampening,
                                      weight_decay=weight_decay, lars_coeff=lars_coeff, eps=eps))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            mu, wd = group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                w_norm = torch.linalg.vector_norm(p)
                g_norm = torch.linalg.vector_norm(g)
                if w_norm > 0 and g_norm > 0:
                    local_lr = group["lars_coeff"] * w_norm / (g_norm + wd * w_norm + group["eps"])
                else:
                    local_lr = torch.ones((), dtype=p.dtype)
                d = (g + wd * p) * local_lr
                if mu:
                    st = self.state[p]
                    if "momentum_buffer" not in st:
                        st["momentum_buffer"] = torch.zeros_like(p)
                    buf = st["momentum_buffer"]
                    buf.mul_(mu).add_(d, alpha=1 - group["dampening"])
                    d = d + mu * buf if group["nesterov"] else buf
                p.sub_(group["lr"] * d)
        return loss
