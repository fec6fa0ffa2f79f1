"""course_lib.data: the shipped corpus (hash-checked), the character tokenizer, the split, batches drawn
from an explicit generator, evaluation windows, synthetic induction sequences, clear errors."""

import hashlib
import pathlib

import pytest
import torch

from course_lib import data
from course_lib.data import (CharTokenizer, CorpusError, eval_windows, get_batch, induction_batch, repeated_passages,
                             load_char_data, load_corpus, split_train_val)

SHIPPED = pathlib.Path(data.__file__).parent / "corpus" / data.CORPUS_FILE


@pytest.fixture(scope="module")
def text():
    return load_corpus()


@pytest.fixture(scope="module")
def char_data():
    return load_char_data()


def test_corpus_is_the_documented_file(text):
    assert len(text) == 1_115_394
    assert len(set(text)) == 65
    assert hashlib.sha256(SHIPPED.read_bytes()).hexdigest() == data.CORPUS_SHA256
    assert text.startswith("First Citizen:\nBefore we proceed any further, hear me speak.")


def test_modified_corpus_raises_naming_both_hashes(tmp_path):
    raw = SHIPPED.read_bytes()
    tampered = tmp_path / "tampered.txt"
    tampered.write_bytes(raw[:-1] + b"?")  # one character changed
    with pytest.raises(CorpusError, match=data.CORPUS_SHA256) as info:
        load_corpus(tampered)
    assert hashlib.sha256(tampered.read_bytes()).hexdigest() in str(info.value)
    truncated = tmp_path / "truncated.txt"
    truncated.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CorpusError, match="modified or corrupt"):
        load_corpus(truncated)
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "missing.txt")
    assert load_corpus(truncated, sha256=None) == raw[: len(raw) // 2].decode()  # own text: no check


def test_tokenizer_vocabulary_is_sorted_distinct_characters(text, char_data):
    tok = char_data.tokenizer
    assert tok.vocab_size == len(tok) == 65
    assert tok.vocab == "".join(sorted(set(text)))
    assert tok.vocab[0] == "\n" and tok.vocab[1] == " "
    assert tok == CharTokenizer.from_text(text) and tok != CharTokenizer("ab")


def test_round_trip(text, char_data):
    tok = char_data.tokenizer
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert tok.decode(ids) == text
    assert tok.decode(ids[:20].tolist()) == text[:20]
    assert tok.encode("").shape == (0,) and tok.decode([]) == ""
    assert tok.encode("ab").tolist() == [tok.vocab.index("a"), tok.vocab.index("b")]


def test_tokenizer_errors_name_the_culprit(char_data):
    tok = char_data.tokenizer
    with pytest.raises(ValueError, match=r"outside the vocabulary: '#', 'é'"):
        tok.encode("a é#b")
    with pytest.raises(ValueError, match=r"\[0, 64\]"):
        tok.decode([0, 65])
    with pytest.raises(ValueError, match=r"\[0, 64\]"):
        tok.decode([-1])
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode([1, 2])
    with pytest.raises(ValueError, match="distinct"):
        CharTokenizer("abca")
    with pytest.raises(ValueError, match="1-D integer"):
        tok.decode(torch.zeros(3))


def test_split_is_ninety_ten_in_order(char_data):
    n = 1_115_394
    assert len(char_data.train) == int(0.9 * n) == 1_003_854
    assert len(char_data.val) == n - 1_003_854 == 111_540
    ids = char_data.tokenizer.encode(load_corpus())
    assert torch.equal(torch.cat([char_data.train, char_data.val]), ids)
    train, val = split_train_val(torch.arange(10), 0.7)
    assert train.tolist() == list(range(7)) and val.tolist() == [7, 8, 9]
    for bad in (0, 1, 1.5, True):
        with pytest.raises(ValueError, match="train_fraction"):
            split_train_val(torch.arange(10), bad)


def test_batches_are_reproducible_from_the_generator(char_data):
    train = char_data.train
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    xa, ya = get_batch(train, 4, 16, g1)
    xb, yb = get_batch(train, 4, 16, g2)
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    xc, _ = get_batch(train, 4, 16, g1)  # the generator advanced: a new batch
    assert not torch.equal(xa, xc)
    state = g1.get_state()
    xd, _ = get_batch(train, 4, 16, g1)
    g1.set_state(state)
    assert torch.equal(get_batch(train, 4, 16, g1)[0], xd)  # state restored: same batch again
    torch.manual_seed(0)
    before = torch.get_rng_state()
    get_batch(train, 4, 16, torch.Generator().manual_seed(1))
    assert torch.equal(torch.get_rng_state(), before)  # the global generator is untouched


def test_targets_are_inputs_shifted_by_one(char_data):
    train = char_data.train
    x, y = get_batch(train, 8, 32, torch.Generator().manual_seed(3), device="cpu")
    assert x.shape == y.shape == (8, 32) and x.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])
    for row in range(8):  # each row is a real window of the split
        window = torch.cat([x[row], y[row, -1:]])
        found = (train.unfold(0, 33, 1) == window).all(dim=1).nonzero()
        assert len(found) >= 1


def test_batch_offsets_cover_the_whole_split():
    data_ = torch.arange(10)
    g = torch.Generator().manual_seed(0)
    firsts = set()
    for _ in range(200):
        x, y = get_batch(data_, 5, 3, g)
        firsts.update(x[:, 0].tolist())
        assert int(y.max()) <= 9
    assert firsts == set(range(7))  # starts 0 … N − T − 1 = 6, all reachable


def test_batch_errors():
    g = torch.Generator()
    with pytest.raises(ValueError, match=r"fewer than context \+ 1 = 11"):
        get_batch(torch.arange(10), 2, 10, g)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        get_batch(torch.arange(100), 2, 10, 0)
    with pytest.raises(ValueError, match=r"batch_size \(0\)"):
        get_batch(torch.arange(100), 0, 10, g)
    with pytest.raises(ValueError, match="1-D integer"):
        get_batch(torch.zeros(100), 2, 10, g)


def test_eval_windows_cover_the_split_once_in_order():
    data_ = torch.arange(23)
    batches = list(eval_windows(data_, batch_size=3, context=5))
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert [b[0].shape[0] for b in batches] == [3, 1]  # W = (23 − 1) // 5 = 4 windows
    assert x.flatten().tolist() == list(range(20))  # non-overlapping, in order
    assert y.flatten().tolist() == list(range(1, 21))  # every target once
    assert list(eval_windows(data_, 3, 5))[0][0].tolist() == batches[0][0].tolist()  # deterministic
    with pytest.raises(ValueError, match="fewer than context"):
        next(eval_windows(torch.arange(5), 2, 5))


def test_induction_batch_repeats_the_first_half():
    g = torch.Generator().manual_seed(0)
    x, y = induction_batch(6, 10, 50, g)
    assert x.shape == y.shape == (6, 19)
    seq = torch.cat([x, y[:, -1:]], dim=1)  # (B, 2L)
    assert torch.equal(seq[:, :10], seq[:, 10:])
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert int(seq.max()) < 50 and int(seq.min()) >= 0
    x2, _ = induction_batch(6, 10, 50, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match=r"half_len \(1\)"):
        induction_batch(2, 1, 50, g)


def test_repeated_passages_repeat_real_text_with_a_period_that_changes():
    data_ = torch.arange(10_000)  # token i is i: a row's start and period can be read off it
    g = torch.Generator().manual_seed(0)
    periods = set()
    for _ in range(40):
        x, y = repeated_passages(data_, 5, 20, g, min_period=4)
        assert x.shape == y.shape == (5, 20)
        assert torch.equal(y[:, :-1], x[:, 1:])  # targets are the inputs shifted by one
        window = torch.cat([x, y[:, -1:]], dim=1)  # (B, T + 1)
        period = int((window[0] == window[0, 0]).nonzero()[1])  # where the first token comes back
        periods.add(period)
        assert 4 <= period <= 11  # min_period … ⌈21 / 2⌉: at least one whole repeat
        for row in window:
            start = int(row[0])
            passage = torch.arange(start, start + period)  # P consecutive tokens of the data
            assert torch.equal(row, passage.repeat(21 // period + 1)[:21])
    assert periods == set(range(4, 12))  # every allowed period occurs
    x2, _ = repeated_passages(data_, 5, 20, torch.Generator().manual_seed(0), min_period=4)
    x1, _ = repeated_passages(data_, 5, 20, torch.Generator().manual_seed(0), min_period=4)
    assert torch.equal(x1, x2)  # the generator is the only randomness
    with pytest.raises(ValueError, match=r"min_period must be at most"):
        repeated_passages(data_, 2, 20, g, min_period=12)
    with pytest.raises(ValueError, match=r"min_period"):
        repeated_passages(data_, 2, 20, g, min_period=1)
