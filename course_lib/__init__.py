"""Reference implementations for the course *Inside the Transformer Block*.

One concept per module, each the subject of a chapter::

    info_theory   entropy, cross-entropy, KL, perplexity, mutual information (chapter 1)
    embeddings    token embedding lookup, √D scaling, weight tying (chapter 2)
    positional    sinusoidal, learned, RoPE (both pairings) and ALiBi positions (chapter 2)
    attention     scaled dot-product attention, causal masks, grouped-query attention (chapter 3)
    tensor_bytes  the bytes of the tensors an operation creates, by operator (chapter 3)
    ffn           ReLU/GELU feed-forward network, SwiGLU, Llama's hidden-width rule (chapter 4)
    norms         LayerNorm, RMSNorm and their Jacobians (chapter 5)
    residual      pre-norm and post-norm residual sublayers, depth measurements (chapter 6)
    init          GPT-2 initialisation with 1/√(2N) residual scaling (chapter 6)
    block         the decoder block: pre/post-norm, RMS/LayerNorm, SwiGLU/GELU/ReLU, RoPE (chapter 7)
    config        ModelConfig and the published shapes of real models, PRESETS (chapter 8)
    counting      exact parameter counts, FLOPs per block, crossover length, memory (chapter 8)
    model         DecoderLM, next-token probabilities, loading Hugging Face Llama/Mistral (chapter 9)
    kv_cache      the KV cache: concatenating, then preallocated with one length (chapter 10)
    checkpointing what backward keeps, measured and predicted; activation checkpointing (chapter 11)
    example       the running example: one sentence followed through every chapter, a printable model
    data          the shipped Tiny Shakespeare corpus, a character tokenizer, batches (chapter 12)
    sampling      temperature, top-k and top-p: logits to a sampling distribution (chapters 9, 12)
    training      AdamW, Muon, warmup + cosine, clipping, evaluation, checkpoints, presets (ch. 12)
    experiments   seeded grids of runs, their statistics and provenance (chapter 12)
    heads         attention-head scores and head ablation (chapter 12)

``data``, ``training``, ``experiments``, ``heads``, ``tensor_bytes`` and ``example`` are imported on
demand (``python -m course_lib.train``, ``python -m course_lib.sample`` and
``python -m course_lib.experiments`` are the command lines); the model never imports them.
``device.get_device()`` is the one place that picks a device; ``notebook.setup()`` is what the
first cell of every notebook calls. ``grading`` holds the checkers the exercises' hidden tests call
and is imported on demand (it is not needed to use the library).
"""

__version__ = "0.2.0"

from . import (
    attention,
    block,
    checkpointing,
    config,
    counting,
    device,
    embeddings,
    ffn,
    info_theory,
    init,
    kv_cache,
    model,
    norms,
    notebook,
    positional,
    residual,
)

__all__ = ["__version__", *(name for name in dir() if not name.startswith("_"))]
