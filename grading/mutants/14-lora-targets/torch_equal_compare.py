# mutant: torch_equal_compare
# exercise: frozen_base_report
# mistake: compares tensors with torch.equal instead of hashing dtype, shape and bits: NaN looks changed, -0.0 unchanged.
def frozen_base_report(before, after, adapter_markers=ADAPTER_MARKERS):
    if type(adapter_markers) is not tuple or len(adapter_markers) == 0:
        raise ValueError("bad markers")
    for marker in adapter_markers:
        if type(marker) is not str or marker == "":
            raise ValueError("bad marker")
    if type(before) is not dict or type(after) is not dict or len(before) == 0 or len(after) == 0:
        raise ValueError("snapshots must be non-empty dicts")
    for snapshot in [before, after]:
        for key in snapshot:
            if type(key) is not str or key == "" or not torch.is_tensor(snapshot[key]):
                raise ValueError("bad entry")
    if sorted(before) != sorted(after):
        raise ValueError("different names")
    result = {"base_tensors": 0, "adapter_tensors": 0, "changed_base": [], "changed_adapter": []}
    for key in sorted(before):
        old, new = before[key], after[key]
        same = old.dtype == new.dtype and old.shape == new.shape and torch.equal(old, new)
        is_adapter = False
        for marker in adapter_markers:
            if marker in key:
                is_adapter = True
        kind = "adapter" if is_adapter else "base"
        result[kind + "_tensors"] += 1
        if not same:
            result["changed_" + kind].append(key)
    if result["changed_base"]:
        result["decision"] = "base_changed"
    elif result["changed_adapter"]:
        result["decision"] = "frozen"
    else:
        result["decision"] = "no_update"
    return result
