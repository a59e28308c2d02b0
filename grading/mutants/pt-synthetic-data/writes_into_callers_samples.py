# mutant: writes_into_callers_samples
# exercise: stamp_generation
# mistake: adds the two hashes to the caller's own dicts and returns them, so stamping changes the input batch.
def stamp_generation(samples, generator, template, seed, version):
    if not all(isinstance(text, str) and text.strip() for text in (generator, template, version)):
        raise ValueError("generator, template and version must be text")
    if type(seed) is not int or seed < 0:
        raise ValueError("seed must be a non-negative int")
    if type(samples) is not list:
        raise ValueError("samples must be a list")

    def digest(obj):
        return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                              .encode("utf-8")).hexdigest()

    ids = []
    for item in samples:
        if type(item) is not dict or not {"sample_id", "prompt", "response"} <= set(item):
            raise ValueError("every sample needs sample_id, prompt and response")
        if not isinstance(item["sample_id"], str) or item["sample_id"] == "" or item["sample_id"] in ids:
            raise ValueError("sample ids must be unique non-empty strings")
        ids.append(item["sample_id"])
        if not isinstance(item["prompt"], str) or item["prompt"].strip() == "":
            raise ValueError("prompt must be text")
        if not (item["response"] is None or isinstance(item["response"], str)):
            raise ValueError("response must be text or None")
    header = {"generator": generator, "seed": seed,
              "template_sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(), "version": version}
    header["generation_id"] = digest({key: header[key] for key in ("generator", "seed", "template_sha256", "version")})
    for item in samples:
        if item.get("generation_id") not in (None, header["generation_id"]):
            raise ValueError("sample belongs to another generation")
    for item in samples:
        item["generation_id"] = header["generation_id"]
        item["content_sha256"] = digest({"prompt": item["prompt"], "response": item["response"]})
    return {"generation": header, "samples": samples}
