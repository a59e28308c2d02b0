# mutant: identity_without_template
# exercise: stamp_generation
# mistake: builds the generation id from generator, seed and version only, so a changed prompt template keeps the old identity.
def stamp_generation(samples, generator, template, seed, version):
    def sha(value):
        return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")).hexdigest()

    for value in (generator, template, version):
        if not isinstance(value, str) or not value.strip():
            raise ValueError("identity fields must be non-empty strings")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError("seed must be a non-negative int")
    template_sha256 = hashlib.sha256(template.encode("utf-8")).hexdigest()
    generation = {"generator": generator, "seed": seed, "template_sha256": template_sha256, "version": version,
                  "generation_id": sha({"generator": generator, "seed": seed, "version": version})}
    seen = set()
    out = []
    for sample in samples:
        if not isinstance(sample, dict) or any(k not in sample for k in ("sample_id", "prompt", "response")):
            raise ValueError("bad sample")
        if not isinstance(sample["sample_id"], str) or not sample["sample_id"] or sample["sample_id"] in seen:
            raise ValueError("bad sample_id")
        seen.add(sample["sample_id"])
        if not isinstance(sample["prompt"], str) or not sample["prompt"].strip():
            raise ValueError("bad prompt")
        if sample["response"] is not None and not isinstance(sample["response"], str):
            raise ValueError("bad response")
        if sample.get("generation_id") not in (None, generation["generation_id"]):
            raise ValueError("foreign generation")
        out.append({**sample, "generation_id": generation["generation_id"],
                    "content_sha256": sha({"prompt": sample["prompt"], "response": sample["response"]})})
    return {"generation": generation, "samples": out}
