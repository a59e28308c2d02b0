# mutant: only_sizes_validated
# exercise: estimate_saved_activation_bytes
# mistake: checks the strategy, batch_size and seq_len but trusts the architecture and dtype_bytes, so a missing key raises KeyError and a zero or a bool goes through.
def estimate_saved_activation_bytes(arch, batch_size, seq_len, strategy, dtype_bytes=4):
    if strategy not in ["baseline", "checkpoint", "offload", "hybrid"]:
        raise ValueError("bad strategy")
    for size in [batch_size, seq_len]:
        if type(size) is not int or size <= 0:
            raise ValueError("bad size")
    T = batch_size * seq_len
    h = arch["hidden_size"]
    layer = dtype_bytes * T * (8 * h + 2 * arch["num_key_value_heads"] * arch["head_dim"]
                               + 4 * arch["intermediate_size"] + arch["num_attention_heads"] + 2)
    result = dict(tokens=T, per_layer_bytes=layer, layer_input_bytes=dtype_bytes * T * h)
    result["outside_layers_bytes"] = dtype_bytes * T * (3 * h + arch["vocab_size"] + 1)
    result["rotary_bytes"] = dtype_bytes * 2 * seq_len * arch["head_dim"]
    result["token_id_bytes"] = 16 * T
    total = result["outside_layers_bytes"] + result["token_id_bytes"]
    if strategy == "baseline" or strategy == "offload":
        total += arch["num_hidden_layers"] * layer + result["rotary_bytes"]
    else:
        total += arch["num_hidden_layers"] * result["layer_input_bytes"]
    result["saved_bytes"] = total
    result["device_bytes"] = total if strategy in ["baseline", "checkpoint"] else 0
    result["host_bytes"] = total - result["device_bytes"]
    return result
