"""course_lib.embeddings against nn.Embedding, one-hot matrix products, and Hugging Face Llama's tying."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib import embeddings as emb


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def test_lookup_matches_nn_embedding(gen):
    table = emb.TokenEmbedding(50, 16)
    reference = nn.Embedding(50, 16)
    reference.weight.data.copy_(table.weight.data)
    ids = torch.randint(0, 50, (3, 7), generator=gen)
    out = table(ids)
    assert out.shape == (3, 7, 16)
    assert torch.equal(out, reference(ids))


def test_one_hot_product_equals_the_lookup_bit_for_bit(gen):
    weight = torch.randn(40, 12, generator=gen)
    ids = torch.randint(0, 40, (4, 9), generator=gen)
    assert torch.equal(emb.embedding_lookup_one_hot(ids, weight), F.embedding(ids, weight))
    assert torch.equal(emb.embedding_lookup_one_hot(ids, weight.double()), weight.double()[ids])


def test_sqrt_d_scaling_and_init_std():
    torch.manual_seed(0)
    d = 256
    vaswani = emb.TokenEmbedding(4000, d, scale_by_sqrt_d=True, init_std=d**-0.5)
    ids = torch.arange(4000)
    assert torch.equal(vaswani(ids), vaswani.weight * math.sqrt(d))
    assert vaswani.weight.std().item() == pytest.approx(d**-0.5, rel=0.02)
    assert vaswani(ids).pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=0.02)  # entries of size ~1
    plain = emb.TokenEmbedding(4000, d)  # Llama-style: std 0.02, no scaling
    assert torch.equal(plain(ids), plain.weight)
    assert plain.weight.std().item() == pytest.approx(0.02, rel=0.02)


def test_only_looked_up_rows_get_gradient(gen):
    table = emb.TokenEmbedding(20, 4)
    ids = torch.tensor([[1, 5, 5, 7]])
    table(ids).sum().backward()
    used = table.weight.grad.abs().sum(-1) > 0
    assert used.nonzero().flatten().tolist() == [1, 5, 7]
    assert torch.equal(table.weight.grad[5], torch.full((4,), 2.0))  # token 5 appears twice


def test_tying_shares_one_parameter_and_saves_v_times_d():
    V, D = 100, 16
    embedding, head = emb.TokenEmbedding(V, D), nn.Linear(D, V, bias=False)
    untied = sum(p.numel() for p in nn.ModuleList([embedding, head]).parameters())
    emb.tie_weights(head, embedding)
    assert head.weight is embedding.weight
    tied = sum(p.numel() for p in nn.ModuleList([embedding, head]).parameters())
    assert untied - tied == V * D
    h = torch.randn(2, 3, D)
    torch.testing.assert_close(head(h), h @ embedding.weight.T)


def test_tied_gradient_is_the_sum_of_both_uses(gen):
    V, D = 30, 8
    ids = torch.randint(0, V, (2, 6), generator=gen)
    targets = torch.randint(0, V, (2, 6), generator=gen)
    mix = torch.randn(D, D, generator=gen)

    def loss(table_in, table_out):
        h = torch.tanh(F.embedding(ids, table_in) @ mix)  # (B, T, D)
        return F.cross_entropy((h @ table_out.T).reshape(-1, V), targets.reshape(-1))

    embedding, head = emb.TokenEmbedding(V, D, init_std=0.5), nn.Linear(D, V, bias=False)
    emb.tie_weights(head, embedding)
    loss(embedding.weight, head.weight).backward()
    w_in = embedding.weight.detach().clone().requires_grad_()
    w_out = embedding.weight.detach().clone().requires_grad_()
    loss(w_in, w_out).backward()
    torch.testing.assert_close(embedding.weight.grad, w_in.grad + w_out.grad)
    assert (w_out.grad.abs().sum(-1) > 0).all()  # the head touches every row, the lookup only a few
    assert (w_in.grad.abs().sum(-1) > 0).sum() <= ids.unique().numel()


def test_hugging_face_tying_saves_the_same_count():
    transformers = pytest.importorskip("transformers")
    sizes = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                 num_attention_heads=4, num_key_value_heads=2)
    counts = {}
    for tie in (False, True):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**sizes, tie_word_embeddings=tie))
        counts[tie] = sum(p.numel() for p in model.parameters())
        if tie:
            assert model.lm_head.weight is model.model.embed_tokens.weight
    assert counts[False] - counts[True] == 96 * 32


def test_works_on_the_device():
    from course_lib.device import get_device

    device = get_device()
    table = emb.TokenEmbedding(10, 4).to(device)
    assert table(torch.tensor([[1, 2]], device=device)).device.type == device.type


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: emb.TokenEmbedding(0, 4), ValueError, "vocab_size (0) must be at least 1"),
        (lambda: emb.TokenEmbedding(10, 4.0), TypeError, "d_model must be an int"),
        (lambda: emb.TokenEmbedding(10, 4, init_std=0), ValueError, "init_std (0)"),
        (lambda: emb.TokenEmbedding(10, 4, scale_by_sqrt_d=1), TypeError, "scale_by_sqrt_d must be a bool"),
        (lambda: emb.TokenEmbedding(10, 4)(torch.tensor([3, 10])), ValueError, "ids must lie in [0, 9]"),
        (lambda: emb.TokenEmbedding(10, 4)(torch.tensor([-1])), ValueError, "ids must lie in [0, 9]"),
        (lambda: emb.TokenEmbedding(10, 4)(torch.tensor([1.0])), TypeError, "ids must hold integer"),
        (lambda: emb.TokenEmbedding(10, 4)([1, 2]), TypeError, "ids must be a tensor"),
        (lambda: emb.embedding_lookup_one_hot(torch.tensor([1]), torch.zeros(4)), ValueError, "(V, D) embedding table"),
        (lambda: emb.tie_weights(nn.Linear(4, 9, bias=False), emb.TokenEmbedding(10, 4)), ValueError,
         "must have the embedding table's shape (10, 4)"),
        (lambda: emb.tie_weights(nn.Linear(4, 10), emb.TokenEmbedding(10, 4)), ValueError, "must have no bias"),
        (lambda: emb.tie_weights(nn.Embedding(10, 4), emb.TokenEmbedding(10, 4)), TypeError,
         "lm_head must be an nn.Linear"),
        (lambda: emb.tie_weights(nn.Linear(4, 10, bias=False), nn.ReLU()), TypeError, "Parameter `weight`"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
