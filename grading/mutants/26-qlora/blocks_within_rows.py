# mutant: blocks_within_rows
# exercise: nf4_quantise
# mistake: cuts each row into its own blocks, so a row whose length is not a multiple of blocksize starts a new block early.
def nf4_quantise(weight, blocksize=64):
    ok_dtype = isinstance(weight, torch.Tensor) and str(weight.dtype) in ("torch.float32", "torch.bfloat16", "torch.float16")
    ok_size = type(blocksize) is int and blocksize > 0
    if not (ok_dtype and ok_size) or weight.numel() == 0 or not torch.isfinite(weight.float()).all():
        raise ValueError("nf4_quantise needs a finite half or single precision tensor and a positive int blocksize")
    rows = weight.float().reshape(1, 1) if weight.dim() == 0 else weight.float().reshape(-1, weight.shape[-1])
    table = torch.tensor(NF4_LEVELS)
    pieces, scales = [], []
    for row in rows:
        for start in range(0, len(row), blocksize):
            chunk = row[start:start + blocksize]
            top = chunk.abs().max()
            scales.append(float(top))
            normed = chunk / top if top > 0 else chunk * 0
            pieces.append((normed[:, None] - table[None, :]).abs().argmin(dim=1))
    return {"codes": torch.cat(pieces).to(torch.uint8).reshape(weight.shape),
            "absmax": torch.tensor(scales, dtype=torch.float32), "shape": tuple(weight.shape), "blocksize": blocksize}
