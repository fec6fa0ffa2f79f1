"""Realistic wrong answers for exercise 01 (information theory)."""

from . import Wrong

ASSIGNMENT = "01_information_theory"

WRONG = [
    # --- Task 1: entropy ------------------------------------------------------------------------------
    Wrong("entropy-answer", "0 · log 0 must count as 0", '''
def entropy(p, base=2.0):
    return -(p * torch.log(p)).sum(dim=-1) / math.log(base)
'''),
    Wrong("entropy-answer", "the sign", '''
def entropy(p, base=2.0):
    log_p = torch.where(p > 0, torch.log(p), torch.zeros_like(p))
    return (p * log_p).sum(dim=-1) / math.log(base)
'''),
    Wrong("entropy-answer", "in nats whatever `base` says", '''
def entropy(p, base=2.0):
    log_p = torch.where(p > 0, torch.log(p), torch.zeros_like(p))
    return -(p * log_p).sum(dim=-1)
'''),
    Wrong("entropy-answer", "in bits whatever `base` says", '''
def entropy(p, base=2.0):
    safe = torch.where(p > 0, p, torch.ones_like(p))
    return -(p * torch.log2(safe)).sum(dim=-1)
'''),
    Wrong("entropy-answer", "converted twice", '''
def entropy(p, base=2.0):
    safe = torch.where(p > 0, p, torch.ones_like(p))
    return -(p * torch.log2(safe)).sum(dim=-1) / math.log(base)
'''),
    Wrong("entropy-answer", "averaged over the outcomes", '''
def entropy(p, base=2.0):
    log_p = torch.where(p > 0, torch.log(p), torch.zeros_like(p))
    return -(p * log_p).mean(dim=-1) / math.log(base)
'''),
    Wrong("entropy-answer", "reduced over every dimension", '''
def entropy(p, base=2.0):
    log_p = torch.where(p > 0, torch.log(p), torch.zeros_like(p))
    return -(p * log_p).sum() / math.log(base)
'''),
    Wrong("entropy-answer", "changed its input `p` in place", '''
def entropy(p, base=2.0):
    p[p == 0] = 1e-30  # avoid log(0)
    return -(p * torch.log(p)).sum(dim=-1) / math.log(base)
'''),
    Wrong("entropy-answer", "should be float32", '''
def entropy(p, base=2.0):
    p = p.double()  # more precision for the logs
    log_p = torch.where(p > 0, torch.log(p), torch.zeros_like(p))
    return -(p * log_p).sum(dim=-1) / math.log(base)
'''),
    Wrong("entropy-answer", "delegates", '''
def entropy(p, base=2.0):
    return torch.special.entr(p).sum(dim=-1) / math.log(base)
'''),
    Wrong("entropy-answer", "Categorical.entropy", '''
def entropy(p, base=2.0):
    return torch.distributions.Categorical(probs=p).entropy() / math.log(base)
'''),
    # --- Task 2: predictions -----------------------------------------------------------------------------
    Wrong("predictions-answer", "entropy of the UNIFORM distribution", '''
def predictions():
    return {"dyadic_bits": 2.0, "init_loss_nats": math.log(65), "kl_impossible": math.inf,
            "ppl_two_tokens": 4.0}
'''),
    Wrong("predictions-answer", "the loss in bits", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": math.log2(65), "kl_impossible": math.inf,
            "ppl_two_tokens": 4.0}
'''),
    Wrong("predictions-answer", "perplexity at initialisation", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": 65, "kl_impossible": math.inf, "ppl_two_tokens": 4.0}
'''),
    Wrong("predictions-answer", "the other direction", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": math.log(65), "kl_impossible": 1.0,
            "ppl_two_tokens": 4.0}
'''),
    Wrong("predictions-answer", "not a finite number", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": math.log(65), "kl_impossible": 1e9,
            "ppl_two_tokens": 4.0}
'''),
    Wrong("predictions-answer", "average of the two tokens' perplexities", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": math.log(65), "kl_impossible": math.inf,
            "ppl_two_tokens": (2 + 8) / 2}
'''),
    Wrong("predictions-answer", "not the probabilities", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": math.log(65), "kl_impossible": math.inf,
            "ppl_two_tokens": 1 / ((0.5 + 0.125) / 2)}
'''),
    Wrong("predictions-answer", "the perplexity is 2 to that power", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": math.log(65), "kl_impossible": math.inf,
            "ppl_two_tokens": 2.0}
'''),
    Wrong("predictions-answer", "still empty", '''
def predictions():
    return {"dyadic_bits": 1.75, "init_loss_nats": ..., "kl_impossible": math.inf, "ppl_two_tokens": 4.0}
'''),
    # --- Task 3: logsumexp ----------------------------------------------------------------------------
    Wrong("logsumexp-answer", "still overflows float16", '''
def logsumexp(z):
    m = z.amax(dim=-1, keepdim=True)
    total = torch.exp(z - m).sum(dim=-1, keepdim=True)
    return (m + torch.log(total)).squeeze(-1)
'''),
    Wrong("logsumexp-answer", "still overflows float16", '''
def logsumexp(z):
    m = z.amax(dim=-1, keepdim=True)
    total = torch.exp(z.float() - m.float()).sum(dim=-1, keepdim=True)  # sum in float32
    total = total.to(z.dtype)  # back to the input's dtype
    return (m + torch.log(total)).squeeze(-1)
'''),
    Wrong("logsumexp-answer", "capped at float16's largest value", '''
def logsumexp(z):
    m = z.amax(dim=-1, keepdim=True)
    total = torch.exp(z - m).sum(dim=-1, keepdim=True)
    total = torch.nan_to_num(total)  # inf -> the largest finite number
    return (m + torch.log(total)).squeeze(-1)
'''),
    Wrong("logsumexp-answer", "are averaged", '''
def logsumexp(z):
    m = z.amax(dim=-1, keepdim=True)
    total = torch.exp(z - m).mean(dim=-1, keepdim=True)  # a mean cannot exceed 1
    return (m + torch.log(total)).squeeze(-1)
'''),
    Wrong("logsumexp-answer", "it should be float16", '''
def logsumexp(z):
    if z.dtype == torch.float16:
        z = z.float()  # float32 has the range
    m = z.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(z - m).sum(dim=-1, keepdim=True))).squeeze(-1)
'''),
    Wrong("logsumexp-answer", "nothing is subtracted before exp", '''
def logsumexp(z):
    # float64 is wide enough that no shift is needed
    return torch.log(torch.exp(z.double()).sum(dim=-1)).to(z.dtype)
'''),
    Wrong("logsumexp-answer", "of the WHOLE batch", '''
def logsumexp(z):
    m = z.max()  # the largest logit
    return m + torch.log(torch.exp(z - m).sum(dim=-1))
'''),
    Wrong("logsumexp-answer", "not added back", '''
def logsumexp(z):
    x = z.float()
    m = x.amax(dim=-1, keepdim=True)
    return torch.log(torch.exp(x - m).sum(dim=-1)).to(z.dtype)
'''),
    Wrong("logsumexp-answer", "keeps the reduced dimension", '''
def logsumexp(z):
    x = z.float()
    m = x.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).to(z.dtype)
'''),
    Wrong("logsumexp-answer", "keepdim=True", '''
def logsumexp(z):
    x = z.float()
    m = x.max(dim=-1).values
    return (m + torch.log(torch.exp(x - m).sum(dim=-1))).to(z.dtype)
'''),
    Wrong("logsumexp-answer", "torch's `logsumexp`", '''
def logsumexp(z):
    return z.float().logsumexp(dim=-1).to(z.dtype)
'''),
    # --- Task 4: label smoothing ----------------------------------------------------------------------
    Wrong("smoothing-answer", "V − 1 OTHER tokens", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    m = logits.amax(-1, keepdim=True)
    log_q = logits - m - torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    one_hot = F.one_hot(targets, V).to(logits.dtype)
    p = one_hot * (1 - smoothing) + (1 - one_hot) * smoothing / (V - 1)
    return -(p * log_q).sum(-1).mean()
'''),
    Wrong("smoothing-answer", "not scaled by (1 − ε)", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    m = logits.amax(-1, keepdim=True)
    log_q = logits - m - torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    p = F.one_hot(targets, V).to(logits.dtype) + smoothing / V
    return -(p * log_q).sum(-1).mean()
'''),
    Wrong("smoothing-answer", "every token gets ε instead of ε / V", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    m = logits.amax(-1, keepdim=True)
    log_q = logits - m - torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    p = (1 - smoothing) * F.one_hot(targets, V).to(logits.dtype) + smoothing
    return -(p * log_q).sum(-1).mean()
'''),
    Wrong("smoothing-answer", "applied to the model's probabilities", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    m = logits.amax(-1, keepdim=True)
    e = torch.exp(logits - m)
    q = e / e.sum(-1, keepdim=True)
    q_smooth = (1 - smoothing) * q + smoothing / V
    return -torch.log(q_smooth.gather(-1, targets.unsqueeze(-1))).mean()
'''),
    Wrong("smoothing-answer", "the log-sum-exp trick", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    log_q = logits - torch.log(torch.exp(logits).sum(-1, keepdim=True))
    p = (1 - smoothing) * F.one_hot(targets, V).to(logits.dtype) + smoothing / V
    return -(p * log_q).sum(-1).mean()
'''),
    Wrong("smoothing-answer", "the smoothing is ignored", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    m = logits.amax(-1, keepdim=True)
    log_q = logits - m - torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    return -log_q.gather(-1, targets.unsqueeze(-1)).mean()
'''),
    Wrong("smoothing-answer", "summed the per-position losses", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    m = logits.amax(-1, keepdim=True)
    log_q = logits - m - torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    p = (1 - smoothing) * F.one_hot(targets, V).to(logits.dtype) + smoothing / V
    return -(p * log_q).sum()
'''),
    Wrong("smoothing-answer", "one loss per position", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    m = logits.amax(-1, keepdim=True)
    log_q = logits - m - torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    p = (1 - smoothing) * F.one_hot(targets, V).to(logits.dtype) + smoothing / V
    return -(p * log_q).sum(-1)
'''),
    Wrong("smoothing-answer", "the cross_entropy operation", '''
def label_smoothed_cross_entropy(logits, targets, smoothing):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), label_smoothing=smoothing)
'''),
    # --- Task 5: the gradient -------------------------------------------------------------------------
    Wrong("gradient-answer", "gradient of the SUM over positions", '''
def soft_cross_entropy_grad(logits, target_probs):
    return torch.softmax(logits, dim=-1) - target_probs
'''),
    Wrong("gradient-answer", "the sign", '''
def soft_cross_entropy_grad(logits, target_probs):
    n = logits.numel() // logits.shape[-1]
    return (target_probs - torch.softmax(logits, dim=-1)) / n
'''),
    Wrong("gradient-answer", "the first dimension only", '''
def soft_cross_entropy_grad(logits, target_probs):
    return (torch.softmax(logits, dim=-1) - target_probs) / logits.shape[0]
'''),
    Wrong("gradient-answer", "by the vocabulary size V", '''
def soft_cross_entropy_grad(logits, target_probs):
    return (torch.softmax(logits, dim=-1) - target_probs) / logits.shape[-1]
'''),
    Wrong("gradient-answer", "treated as one-hot", '''
def soft_cross_entropy_grad(logits, target_probs):
    n = logits.numel() // logits.shape[-1]
    y = target_probs.argmax(dim=-1)
    one_hot = F.one_hot(y, logits.shape[-1]).to(logits.dtype)
    return (torch.softmax(logits, dim=-1) - one_hot) / n
'''),
    Wrong("gradient-answer", "with respect to the probabilities", '''
def soft_cross_entropy_grad(logits, target_probs):
    n = logits.numel() // logits.shape[-1]
    return -target_probs / torch.softmax(logits, dim=-1) / n
'''),
    Wrong("gradient-answer", "Jacobian is taken as diagonal", '''
def soft_cross_entropy_grad(logits, target_probs):
    n = logits.numel() // logits.shape[-1]
    q = torch.softmax(logits, dim=-1)
    # dL/dq_i = -P_i / q_i, and dq_i/dz_i = q_i (1 - q_i)
    return -target_probs / q * q * (1 - q) / n
'''),
    Wrong("gradient-answer", "Tensor.backward", '''
def soft_cross_entropy_grad(logits, target_probs):
    z = logits.detach().clone().requires_grad_()
    q = torch.softmax(z, dim=-1)
    loss = -(target_probs * torch.log(q)).sum(-1).mean()
    loss.backward()
    return z.grad
'''),
]
