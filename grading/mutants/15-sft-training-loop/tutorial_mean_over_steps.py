# mutant: tutorial_mean_over_steps
# exercise: accumulate_gradients
# mistake: the loop most tutorials show: each micro-batch's mean loss divided by the number of accumulation steps, with hardly any validation.
def accumulate_gradients(model, micro_batches):
    if not micro_batches:
        raise ValueError("nothing to accumulate")
    model.zero_grad(set_to_none=True)
    steps = len(micro_batches)
    losses, counts = [], []
    for batch in micro_batches:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        shift_logits = out.logits[..., :-1, :].contiguous()
        shift_labels = batch["labels"][..., 1:].contiguous()
        mean = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        (mean / steps).backward()
        counts.append(int((shift_labels != -100).sum()))
        losses.append(float(mean))
    return {"loss": sum(losses) / steps, "supervised_tokens": sum(counts), "micro_batch_tokens": counts,
            "gradients": {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}}
