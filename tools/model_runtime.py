"""`tools.model_runtime`: the name the course's chapters use for its models. A facade only: the
code lives in `tools.models` (architectures, cache, builders, loading); nothing inside `tools`
imports this module."""

from tools.models.architectures import (  # noqa: F401
    BUILDER_VERSION,
    CHAT_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    IDENTITY_FILE,
    IDENTITY_SCHEMA,
    QWEN2_PRETOKENIZE_REGEX,
    QWEN25_05B_INSTRUCT,
    RANDOM_INIT_ARCHITECTURES,
    RANDOM_INIT_SEED,
    SPECIAL_TOKENS,
    TINY_ARCHITECTURE,
    TINY_FOLDER,
    TINY_MODEL_ID,
    TINY_SEED,
    TINY_TOKENIZER_VOCAB_TARGET,
)
from tools.models.builders import (  # noqa: F401
    build_random_init_model,
    build_tiny_model,
    build_tiny_tokenizer,
    tiny_corpus,
    train_tiny_bpe,
)
from tools.models.cache import (  # noqa: F401
    MODEL_CACHE_ENV,
    MODEL_SOURCES,
    default_cache_dir,
    download_command,
    find_local_model,
    model_cache_check,
    random_init_folder,
)
from tools.models.loading import expected_model_path, load_causal_lm, model_identity, resolve_model, sampling_generation_kwargs  # noqa: F401
