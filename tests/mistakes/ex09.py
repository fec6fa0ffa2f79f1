"""Realistic wrong answers for exercise 09 (from block to language model)."""

from . import Wrong

ASSIGNMENT = "09_language_model"

WRONG = [
    # --- Task 1: lm_forward ---------------------------------------------------------------------------
    Wrong("forward-answer", "the final norm is missing", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)  # each block already normalises its input
    head = embedding if tie_embeddings else head_weight
    return x @ head.T
'''),
    Wrong("forward-answer", "ignores its gain", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    head = embedding if tie_embeddings else head_weight
    return x @ head.T
'''),
    Wrong("forward-answer", "subtracts the mean", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = x - x.mean(-1, keepdim=True)
    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight
    return x @ (embedding if tie_embeddings else head_weight).T
'''),
    Wrong("forward-answer", "untied although tie_embeddings is True", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight
    return x @ head_weight.T  # the head's weights are given, so use them
'''),
    Wrong("forward-answer", "multiplied by √D", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids] * math.sqrt(embedding.shape[1])  # as in "Attention is all you need"
    for block in blocks:
        x = block(x)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight
    return x @ (embedding if tie_embeddings else head_weight).T
'''),
    Wrong("forward-answer", "you returned probabilities", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight
    logits = x @ (embedding if tie_embeddings else head_weight).T
    return torch.softmax(logits, dim=-1)
'''),
    Wrong("forward-answer", "applied before the blocks", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight  # pre-norm!
    for block in blocks:
        x = block(x)
    return x @ (embedding if tie_embeddings else head_weight).T
'''),
    Wrong("forward-answer", "it should be float32", '''
def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = x.double()  # the norm is more accurate in float64
    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.double()
    return x @ (embedding if tie_embeddings else head_weight).double().T
'''),
    Wrong("forward-answer", "scores no points", '''
import torch.nn.functional as F

def lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = F.rms_norm(x, (x.shape[-1],), norm_weight, eps)
    return x @ (embedding if tie_embeddings else head_weight).T
'''),
    # --- Task 2: next_token_probs (find and fix) -------------------------------------------------------
    Wrong("probs-answer", "still what the given version does", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    lengths = attention_mask.long().sum(dim=1)  # count as ints, so bool masks work too
    rows = torch.arange(logits.shape[0])
    return torch.softmax(logits[rows, lengths - 1] / temperature, dim=-1)
'''),
    Wrong("probs-answer", "read every sequence at the last position", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    # with padding on the left, every sequence ends at the last position
    return torch.softmax(logits[:, -1] / temperature, dim=-1)
'''),
    Wrong("probs-answer", "FIRST real token", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    last = attention_mask.long().argmax(dim=1)  # where the mask is 1
    rows = torch.arange(logits.shape[0])
    return torch.softmax(logits[rows, last] / temperature, dim=-1)
'''),
    Wrong("probs-answer", "distance from the end", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    last = attention_mask.long().flip(1).argmax(dim=1)  # the last 1, searching from the end
    rows = torch.arange(logits.shape[0])
    return torch.softmax(logits[rows, last] / temperature, dim=-1)
'''),
    Wrong("probs-answer", "(B, B, V)", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    T = logits.shape[1]
    last = (attention_mask.bool() * torch.arange(T)).amax(dim=1)
    return torch.softmax(logits[:, last] / temperature, dim=-1)
'''),
    Wrong("probs-answer", "multiplies the logits", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    T = logits.shape[1]
    last = (attention_mask.bool() * torch.arange(T)).amax(dim=1)
    rows = torch.arange(logits.shape[0])
    return torch.softmax(logits[rows, last] * temperature, dim=-1)
'''),
    Wrong("probs-answer", "overflows", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    T = logits.shape[1]
    last = (attention_mask.bool() * torch.arange(T)).amax(dim=1)
    z = logits[torch.arange(logits.shape[0]), last] / temperature
    e = torch.exp(z)
    return e / e.sum(dim=-1, keepdim=True)
'''),
    Wrong("probs-answer", "log-probabilities", '''
def next_token_probs(logits, attention_mask, temperature=1.0):
    T = logits.shape[1]
    last = (attention_mask.bool() * torch.arange(T)).amax(dim=1)
    z = logits[torch.arange(logits.shape[0]), last] / temperature
    return torch.log_softmax(z, dim=-1)  # more stable
'''),
    # --- Task 3: sample_generate (extend) --------------------------------------------------------------
    Wrong("sample-answer", "do not come from `generator`", '''
def sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = ids
    for _ in range(max_new_tokens):
        z = model(out)[:, -1] / temperature
        if top_k is not None:
            kth = torch.topk(z, top_k).values[:, -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        next_id = torch.multinomial(torch.softmax(z, dim=-1), 1)
        out = torch.cat([out, next_id], dim=1)
    return out
'''),
    Wrong("sample-answer", "do not come from `generator`", '''
def sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = ids
    for _ in range(max_new_tokens):
        z = model(out)[:, -1] / temperature
        if top_k is not None:
            kth = torch.topk(z, top_k).values[:, -1:]
            z = torch.where(z < kth, float("-inf"), z)
        dist = torch.distributions.Categorical(logits=z)
        out = torch.cat([out, dist.sample()[:, None]], dim=1)
    return out
'''),
    Wrong("sample-answer", "greedy", '''
def sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = ids
    for _ in range(max_new_tokens):
        z = model(out)[:, -1] / temperature
        if top_k is not None:
            kth = torch.topk(z, top_k).values[:, -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        out = torch.cat([out, torch.softmax(z, -1).argmax(-1, keepdim=True)], dim=1)
    return out
'''),
    Wrong("sample-answer", "multiplies the logits", '''
def sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = ids
    for _ in range(max_new_tokens):
        z = model(out)[:, -1] * temperature
        if top_k is not None:
            kth = torch.topk(z, top_k).values[:, -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        next_id = torch.multinomial(torch.softmax(z, dim=-1), 1, generator=generator)
        out = torch.cat([out, next_id], dim=1)
    return out
'''),
    Wrong("sample-answer", "top_k is ignored", '''
def sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = ids
    for _ in range(max_new_tokens):
        p = torch.softmax(model(out)[:, -1] / temperature, dim=-1)
        next_id = torch.multinomial(p, 1, generator=generator)
        out = torch.cat([out, next_id], dim=1)
    return out
'''),
    Wrong("sample-answer", "feeds only the prompt", '''
def sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    logits = model(ids)[:, -1] / temperature  # the prompt's logits, computed once
    if top_k is not None:
        kth = torch.topk(logits, top_k).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    p = torch.softmax(logits, dim=-1)
    new = [torch.multinomial(p, 1, generator=generator) for _ in range(max_new_tokens)]
    return torch.cat([ids] + new, dim=1)
'''),
    Wrong("sample-answer", "only the new tokens", '''
def sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out, new = ids, []
    for _ in range(max_new_tokens):
        z = model(out)[:, -1] / temperature
        if top_k is not None:
            kth = torch.topk(z, top_k).values[:, -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        next_id = torch.multinomial(torch.softmax(z, -1), 1, generator=generator)
        out = torch.cat([out, next_id], dim=1)
        new.append(next_id)
    return torch.cat(new, dim=1) if new else ids[:, :0]
'''),
    # --- Task 4: tied_embedding_grad (derive) ----------------------------------------------------------
    Wrong("grad-answer", "only the LM head's contribution", '''
def tied_embedding_grad(ids, targets, embedding, w):
    n = ids.numel()
    h = embedding[ids.reshape(n)] @ w.T
    p = torch.softmax(h @ embedding.T, dim=-1)
    p[torch.arange(n), targets.reshape(n)] -= 1
    return (p / n).T @ h  # dL/dE = dL/dz^T h
'''),
    Wrong("grad-answer", "only the embedding's contribution", '''
def tied_embedding_grad(ids, targets, embedding, w):
    n = ids.numel()
    flat = ids.reshape(n)
    h = embedding[flat] @ w.T
    g = torch.softmax(h @ embedding.T, dim=-1)
    g[torch.arange(n), targets.reshape(n)] -= 1
    g = g / n
    return torch.zeros_like(embedding).index_add(0, flat, g @ embedding @ w)
'''),
    Wrong("grad-answer", "repeated ids", '''
def tied_embedding_grad(ids, targets, embedding, w):
    n = ids.numel()
    flat = ids.reshape(n)
    h = embedding[flat] @ w.T
    g = torch.softmax(h @ embedding.T, dim=-1)
    g[torch.arange(n), targets.reshape(n)] -= 1
    g = g / n
    grad = g.T @ h
    grad[flat] += g @ embedding @ w
    return grad
'''),
    Wrong("grad-answer", "MEAN over all B·T", '''
def tied_embedding_grad(ids, targets, embedding, w):
    n = ids.numel()
    flat = ids.reshape(n)
    h = embedding[flat] @ w.T
    g = torch.softmax(h @ embedding.T, dim=-1)
    g[torch.arange(n), targets.reshape(n)] -= 1
    return g.T @ h + torch.zeros_like(embedding).index_add(0, flat, g @ embedding @ w)
'''),
    Wrong("grad-answer", "not over the B sequences", '''
def tied_embedding_grad(ids, targets, embedding, w):
    B, T = ids.shape
    flat = ids.reshape(B * T)
    h = embedding[flat] @ w.T
    g = torch.softmax(h @ embedding.T, dim=-1)
    g[torch.arange(B * T), targets.reshape(B * T)] -= 1
    g = g / B  # mean over the batch
    return g.T @ h + torch.zeros_like(embedding).index_add(0, flat, g @ embedding @ w)
'''),
    Wrong("grad-answer", "one-hot is missing", '''
def tied_embedding_grad(ids, targets, embedding, w):
    n = ids.numel()
    flat = ids.reshape(n)
    h = embedding[flat] @ w.T
    g = torch.softmax(h @ embedding.T, dim=-1) / n
    return g.T @ h + torch.zeros_like(embedding).index_add(0, flat, g @ embedding @ w)
'''),
    Wrong("grad-answer", "not (∂L/∂h) wᵀ", '''
def tied_embedding_grad(ids, targets, embedding, w):
    n = ids.numel()
    flat = ids.reshape(n)
    h = embedding[flat] @ w.T
    g = torch.softmax(h @ embedding.T, dim=-1)
    g[torch.arange(n), targets.reshape(n)] -= 1
    g = g / n
    grad_x = g @ embedding @ w.T  # h = x w^T, so transpose w on the way back
    return g.T @ h + torch.zeros_like(embedding).index_add(0, flat, grad_x)
'''),
    Wrong("grad-answer", "the head reads h", '''
def tied_embedding_grad(ids, targets, embedding, w):
    n = ids.numel()
    flat = ids.reshape(n)
    x = embedding[flat]
    g = torch.softmax((x @ w.T) @ embedding.T, dim=-1)
    g[torch.arange(n), targets.reshape(n)] -= 1
    g = g / n
    return g.T @ x + torch.zeros_like(embedding).index_add(0, flat, g @ embedding @ w)
'''),
    Wrong("grad-answer", "scores no points", '''
def tied_embedding_grad(ids, targets, embedding, w):
    E = embedding.clone().requires_grad_()
    logits = (E[ids] @ w.T) @ E.T
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, E.shape[0]), targets.reshape(-1))
    loss.backward()
    return E.grad
'''),
]
