# mutant: adapters_train_by_name
# exercise: trainable_report
# mistake: sorts tensors into groups by their names ("lora_" means trainable) instead of by requires_grad, so a base tensor left trainable is never reported.
def trainable_report(parameters, compute_dtype):
    allowed = {"nf4", "float32", "bfloat16", "float16"}
    try:
        assert compute_dtype in allowed - {"nf4"} and type(parameters) is list and parameters
        assert len({row["name"] for row in parameters}) == len(parameters)
        for row in parameters:
            assert set(row) == {"name", "shape", "storage", "requires_grad"} and type(row["name"]) is str
            assert row["name"] and type(row["shape"]) in (list, tuple) and row["storage"] in allowed
            assert all(type(size) is int and size >= 1 for size in row["shape"]) and type(row["requires_grad"]) is bool
    except (AssertionError, KeyError, TypeError):
        raise ValueError("the table or the compute dtype is malformed") from None

    def group_of(row):
        if "lora_" in row["name"]:
            return "trainable"
        return "frozen_4bit" if row["storage"] == "nf4" else "frozen"

    def size_of(row):
        total = 1
        for size in row["shape"]:
            total *= size
        return total

    keys = ("frozen_4bit", "frozen", "trainable")
    members = {key: sorted(row["name"] for row in parameters if group_of(row) == key) for key in keys}
    elements = {key: sum(size_of(row) for row in parameters if group_of(row) == key) for key in keys}
    problems = [{"name": row["name"], "problem": "adapter_in_4bit"} for row in sorted(parameters, key=lambda r: r["name"])
                if "lora_" in row["name"] and row["storage"] == "nf4"]
    if problems:
        verdict = "invalid"
    elif members["trainable"]:
        verdict = "qlora" if members["frozen_4bit"] else "lora"
    else:
        verdict = "nothing_trains"
    everything = sum(elements.values())
    return dict(members, parameters=elements, trainable_share=elements["trainable"] / everything,
                compute_dtype=compute_dtype,
                trainable_storage=sorted({row["storage"] for row in parameters if group_of(row) == "trainable"}),
                problems=problems, verdict=verdict)
