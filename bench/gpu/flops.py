"""Model FLOPs of a GPT for MFU (scripts/gpu-check.sh)."""


def model_flops_per_token(L, h, V, s):
    """Narayanan et al. 2021 (eq. 3), the formula dplan's cost model states (docs/costmodel.md):
    72 B s L h^2 (1 + s / (6 h) + V / (12 L h)) per iteration of B sequences, so per token
    72 L h^2 + 12 L h s + 6 V h (backward twice the forward, full s x s attention scores)."""
    return 72 * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
