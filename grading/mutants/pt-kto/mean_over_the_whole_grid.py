# mutant: mean_over_the_whole_grid
# exercise: kto_reference_point
# mistake: a learner's reference point that averages every cell of the log-ratio matrix, diagonal included.
import torch


def _square(matrix):
    ok = isinstance(matrix, torch.Tensor) and matrix.dtype in (torch.float32, torch.float64) and matrix.dim() == 2
    if not ok or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2 or not torch.isfinite(matrix).all():
        raise ValueError("need a finite square matrix of at least two examples")
    return matrix.shape[0]


def kto_reference_point(policy_logps, reference_logps):
    size = _square(policy_logps)
    if _square(reference_logps) != size or policy_logps.dtype != reference_logps.dtype:
        raise ValueError("matrices differ")
    grid = policy_logps.detach() - reference_logps.detach()
    average = grid.sum() / grid.numel()
    return {"z0": torch.clamp(average, min=0.0), "raw_mean": average.item(),
            "pairs": [[row, (row - 1) % size] for row in range(size)]}
