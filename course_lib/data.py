"""Data for training: the shipped Tiny Shakespeare corpus, a character tokenizer, the train/validation
split, random training batches, deterministic evaluation windows, and synthetic sequences for the
mechanism experiments (induction heads).

Conventions
-----------
* A corpus is a 1-D ``torch.long`` tensor of token ids, N tokens. A training example is a window of
  T + 1 consecutive tokens: the input x is its first T, the target y its last T, so that
  ``y[:, t] == x[:, t + 1]`` and the logits at position t are scored against y[:, t] — the token that
  follows x[:, t] (as ``model.DecoderLM`` reads its logits).
* Randomness comes only from an explicit ``torch.Generator`` passed in (a CPU generator: the same
  seed draws the same batches on every device). Nothing here touches the global generator.
* The corpus ships inside the package (``course_lib/corpus/``) and is checked against its SHA-256 on
  every load; nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import NamedTuple

import torch

__all__ = [
    "CORPUS_FILE",
    "CORPUS_SHA256",
    "CorpusError",
    "CharTokenizer",
    "CharData",
    "load_corpus",
    "load_char_data",
    "split_train_val",
    "get_batch",
    "eval_windows",
    "induction_batch",
    "repeated_passages",
]

CORPUS_FILE = "tinyshakespeare.txt"
CORPUS_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


class CorpusError(ValueError):
    """The shipped corpus is missing, modified or corrupt."""


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} ({value}) must be at least {minimum}")
    return value


def _check_generator(generator) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)), "
                        f"got {type(generator).__name__}")
    return generator


def _check_ids(data, name: str = "data") -> torch.Tensor:
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D tensor of token ids, got {type(data).__name__}")
    if data.dim() != 1 or data.is_floating_point() or data.is_complex() or data.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D integer tensor of token ids, got shape {tuple(data.shape)} "
                         f"and dtype {data.dtype}")
    return data


# --- the corpus ------------------------------------------------------------------------------------

def load_corpus(path: str | os.PathLike | None = None, *, sha256: str | None = CORPUS_SHA256) -> str:
    """The text of Tiny Shakespeare (1,115,394 characters, 65 distinct), shipped with the package.

    ``path`` reads another file instead (the shipped one when None). The bytes are checked against
    ``sha256`` (the shipped corpus's hash by default; None skips the check, for your own text) before
    they are decoded as UTF-8: a modified or truncated file raises :class:`CorpusError` naming both
    hashes rather than silently training on different data.
    """
    if path is None:
        resource = resources.files("course_lib") / "corpus" / CORPUS_FILE
        name = f"course_lib/corpus/{CORPUS_FILE}"
        try:
            raw = resource.read_bytes()
        except FileNotFoundError:
            raise CorpusError(f"the shipped corpus {name} is missing: reinstall course_lib "
                              f"(it is package data)") from None
    else:
        name = os.fspath(path)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise CorpusError(f"corpus file {name!r} does not exist") from None
    if sha256 is not None:
        digest = hashlib.sha256(raw).hexdigest()
        if digest != sha256:
            raise CorpusError(f"{name} has SHA-256 {digest}, expected {sha256}: the file is modified or "
                              f"corrupt (reinstall course_lib, or pass sha256=None for your own text)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{name} is not UTF-8 text: {err}") from None


# --- the tokenizer ---------------------------------------------------------------------------------

class CharTokenizer:
    """One token per character: id i ↔ ``vocab[i]``, the vocabulary being a string of distinct
    characters (``from_text`` uses the sorted distinct characters of a text: 65 for Tiny
    Shakespeare, newline first, then space, punctuation, capitals, lower case).

    ``encode(text)`` → 1-D ``torch.long`` tensor; ``decode(ids)`` → str. A character outside the
    vocabulary raises ``ValueError`` naming it; so does an id outside [0, V − 1].
    """

    def __init__(self, vocab: str):
        if not isinstance(vocab, str) or not vocab:
            raise TypeError(f"vocab must be a non-empty string of distinct characters, got {vocab!r:.40}")
        if len(set(vocab)) != len(vocab):
            repeated = sorted({c for c in vocab if vocab.count(c) > 1})
            raise ValueError(f"vocab must hold distinct characters; repeated: {repeated}")
        self.vocab = vocab
        self.stoi = {ch: i for i, ch in enumerate(vocab)}  # character → id

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is ``sorted(set(text))``."""
        if not isinstance(text, str) or not text:
            raise ValueError("text must be a non-empty string")
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        """V, the number of distinct tokens."""
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

    def __eq__(self, other) -> bool:
        return isinstance(other, CharTokenizer) and other.vocab == self.vocab

    def __hash__(self) -> int:
        return hash(self.vocab)

    def unknown(self, text: str) -> list[str]:
        """The distinct characters of ``text`` that are not in the vocabulary, sorted."""
        return sorted(set(text) - self.stoi.keys())

    def encode(self, text: str) -> torch.Tensor:
        """text (N characters) → ids (N,), dtype long: ``ids[i] = vocab.index(text[i])``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        missing = self.unknown(text)
        if missing:
            shown = ", ".join(repr(c) for c in missing[:10]) + (" …" if len(missing) > 10 else "")
            raise ValueError(f"text contains {len(missing)} character(s) outside the vocabulary: {shown}")
        stoi = self.stoi
        return torch.tensor([stoi[ch] for ch in text], dtype=torch.long)  # (N,)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """ids (N,) → text of N characters: ``vocab[ids[0]] + vocab[ids[1]] + …``."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
                raise ValueError(f"ids must be a 1-D integer tensor, got shape {tuple(ids.shape)} "
                                 f"and dtype {ids.dtype}")
            ids = ids.tolist()
        ids = list(ids)
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.vocab)]
        if bad:
            raise ValueError(f"ids must be ints in [0, {len(self.vocab) - 1}] (V = {len(self.vocab)}); "
                             f"got {bad[0]!r}")
        vocab = self.vocab
        return "".join(vocab[i] for i in ids)


# --- splits ----------------------------------------------------------------------------------------

def split_train_val(ids: torch.Tensor, train_fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``int(train_fraction · N)`` tokens for training, the rest for validation — a split
    in time, not a shuffle: the validation text is a part of the play the model never reads."""
    ids = _check_ids(ids, "ids")
    if isinstance(train_fraction, bool) or not isinstance(train_fraction, (int, float)) \
            or not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction ({train_fraction}) must be a number strictly between 0 and 1")
    n_train = int(train_fraction * len(ids))
    return ids[:n_train], ids[n_train:]


class CharData(NamedTuple):
    """The corpus, ready to train on: its tokenizer and the two splits (1-D long tensors)."""

    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor


def load_char_data(train_fraction: float = 0.9) -> CharData:
    """Tiny Shakespeare, tokenised by character and split: 1,003,854 training and 111,540 validation
    tokens over a vocabulary of 65 at the default fraction 0.9."""
    text = load_corpus()
    tokenizer = CharTokenizer.from_text(text)
    train, val = split_train_val(tokenizer.encode(text), train_fraction)
    return CharData(tokenizer, train, val)


# --- batches ---------------------------------------------------------------------------------------

def get_batch(data: torch.Tensor, batch_size: int, context: int, generator: torch.Generator,
              device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """B random windows of T + 1 consecutive tokens → inputs x (B, T) and targets y (B, T), with
    ``y[:, t] == x[:, t + 1]`` (the targets are the inputs shifted by one).

    The B start offsets are drawn uniformly from 0 … N − T − 1 with ``generator`` (the only source
    of randomness: the same generator state gives the same batch). ``data`` (N,) may live on any
    device (keep it on the training device to avoid a copy per step); x and y land on ``device``
    (default: data's).
    """
    data = _check_ids(data)
    batch_size = _check_int(batch_size, "batch_size", 1)
    context = _check_int(context, "context", 1)
    _check_generator(generator)
    if len(data) < context + 1:
        raise ValueError(f"data holds {len(data)} tokens, fewer than context + 1 = {context + 1}")
    starts = torch.randint(len(data) - context, (batch_size,), generator=generator,
                           device=generator.device)  # (B,)
    offsets = torch.arange(context + 1, device=generator.device)  # (T + 1,)
    window = data[(starts[:, None] + offsets).to(data.device)]  # (B, T + 1)
    x, y = window[:, :-1], window[:, 1:]  # (B, T) each: y is x shifted by one
    if device is not None:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return x, y


def eval_windows(data: torch.Tensor, batch_size: int, context: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Every non-overlapping window of the split, in order, in batches: deterministic evaluation.

    Window w covers tokens w·T … w·T + T, input ``data[w·T : w·T + T]`` and target
    ``data[w·T + 1 : w·T + T + 1]``, for w = 0 … W − 1 with W = ⌊(N − 1) / T⌋; so every token but
    the first and the last (N − 1) mod T is predicted exactly once, with a context of 0 … T − 1
    earlier tokens of its window. Yields (x, y), each (b, T) with b = ``batch_size`` except perhaps
    the last batch, on data's device.
    """
    data = _check_ids(data)
    batch_size = _check_int(batch_size, "batch_size", 1)
    context = _check_int(context, "context", 1)
    n_windows = (len(data) - 1) // context
    if n_windows == 0:
        raise ValueError(f"data holds {len(data)} tokens, fewer than context + 1 = {context + 1}")
    used = n_windows * context
    inputs = data[:used].view(n_windows, context)  # (W, T)
    targets = data[1:used + 1].view(n_windows, context)  # (W, T): shifted by one
    for start in range(0, n_windows, batch_size):
        yield inputs[start:start + batch_size], targets[start:start + batch_size]  # (b, T) each


# --- synthetic data --------------------------------------------------------------------------------

def induction_batch(batch_size: int, half_len: int, vocab_size: int, generator: torch.Generator,
                    device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of ``half_len`` = L uniform random tokens, each followed by itself again: s = r ‖ r,
    of length 2L, cut into inputs x = s[:-1] and targets y = s[1:], each (B, 2L − 1).

    In the first half nothing is predictable: the best loss is ln V. From target position L on
    (y[:, L:], the copies of r[1:]) each token can be copied from the first half, by an induction
    head: find the earlier occurrence of the current token and predict what followed it
    (Olsson et al., 2022). Target L − 1 (the first token again) is predictable only by counting
    positions. Tokens are drawn with ``generator`` on the CPU and moved to ``device``.
    """
    batch_size = _check_int(batch_size, "batch_size", 1)
    half_len = _check_int(half_len, "half_len", 2)
    vocab_size = _check_int(vocab_size, "vocab_size", 2)
    _check_generator(generator)
    first = torch.randint(vocab_size, (batch_size, half_len), generator=generator,
                          device=generator.device)  # (B, L)
    seq = torch.cat([first, first], dim=1)  # (B, 2L): the same L tokens twice
    x, y = seq[:, :-1], seq[:, 1:]  # (B, 2L − 1) each
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


def repeated_passages(data: torch.Tensor, batch_size: int, context: int, generator: torch.Generator,
                      min_period: int = 16,
                      device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """B windows of real text that repeat: each row is a passage of P consecutive tokens of ``data``
    (its own random start), written out again and again until it fills T + 1 tokens, then cut into
    inputs x (B, T) and targets y (B, T) as :func:`get_batch` does. One period P per batch, drawn
    uniformly from ``min_period`` … ⌈(T + 1) / 2⌉, so every row holds at least one whole repeat.

    From target position P − 1 on, every token can be copied from P positions back. Because P changes
    from batch to batch, a head that attends a fixed distance back does not help: the model has to
    find where the current text occurred before and read what came next — an induction head. Mixed
    into ordinary batches, these windows reward copying on natural text (chapter 12).
    """
    data = _check_ids(data)
    batch_size = _check_int(batch_size, "batch_size", 1)
    context = _check_int(context, "context", 2)
    longest = (context + 2) // 2  # ⌈(T + 1) / 2⌉: two copies fill the window
    min_period = _check_int(min_period, "min_period", 2)
    if min_period > longest:
        raise ValueError(f"min_period must be at most ⌈(context + 1) / 2⌉ = {longest}, got {min_period}")
    _check_generator(generator)
    if len(data) < longest:
        raise ValueError(f"data holds {len(data)} tokens, fewer than one period of {longest}")
    period = int(torch.randint(min_period, longest + 1, (), generator=generator, device=generator.device))
    starts = torch.randint(len(data) - period + 1, (batch_size,), generator=generator,
                           device=generator.device)  # (B,)
    offsets = torch.arange(context + 1, device=generator.device) % period  # (T + 1,): 0 … P − 1, 0 …
    window = data[(starts[:, None] + offsets).to(data.device)]  # (B, T + 1)
    x, y = window[:, :-1], window[:, 1:]  # (B, T) each
    if device is not None:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return x, y
