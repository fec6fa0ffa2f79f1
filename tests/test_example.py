"""The running example is the same everywhere: its ids decode to the sentence, its model is printable
and reproducible."""

import torch

from course_lib import example


def test_the_sentence_round_trips_through_the_corpus_tokenizer():
    ids = example.sentence_ids()
    assert ids.shape == (1, len(example.SENTENCE)) and ids.dtype == torch.long
    assert example.tokenizer().decode(ids[0]) == example.SENTENCE
    assert example.tokenizer().vocab_size == 65


def test_the_tiny_model_is_small_reproducible_and_runs_on_the_sentence():
    a, b = example.tiny_model(seed=3), example.tiny_model(seed=3)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    config = example.tiny_config()
    assert (config.d_model, config.n_heads, config.n_kv_heads, config.head_dim, config.d_ff) == (8, 2, 1, 4, 24)
    logits = a(example.sentence_ids())
    assert logits.shape == (1, len(example.SENTENCE), 65)
    assert not example.tiny_model(seed=4)(example.sentence_ids()).allclose(logits)


def test_drawing_the_tiny_model_leaves_the_global_generator_alone():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    example.tiny_model(seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_drawing_a_model_leaves_every_devices_generator_alone(monkeypatch):
    """The weights are drawn on the CPU from the CPU's generator alone: seeding with torch.manual_seed
    would also reseed every CUDA device's generator (dropout's masks on a GPU), which fork_rng(devices=[])
    does not put back. Checked where there is no GPU by watching the call that would reseed them."""
    from course_lib.training import build_model

    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", reseeded.append)
    before = torch.get_rng_state()
    example.tiny_model(seed=5)
    build_model(example.tiny_config(), seed=5)
    assert reseeded == [] and torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(5)  # the check can fail: this is the call that reseeds them
    assert reseeded == [5]
