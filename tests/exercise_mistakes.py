"""Known wrong answers for every graded task, used by tests/test_exercises.py.

For each assignment, each answer cell's ``grade_id`` maps to replacement code with one typical
mistake. Autograding a copy of the source notebook with that one cell replaced must cost exactly the
points of the matching test cell. A new assignment must add its entries here (a test checks).
"""

MISTAKES: dict[str, dict[str, str]] = {
    "01_information_theory": {
        # 0 · log 0 computed literally: NaN for zero probabilities
        "entropy-answer": '''\
def entropy(p, base=2.0):
    return -(p * torch.log(p)).sum(dim=-1) / math.log(base)
''',
        # no max-subtraction: exp overflows for large logits
        "loss-answer": '''\
def cross_entropy_from_logits(logits, targets):
    log_norm = torch.log(torch.exp(logits).sum(dim=-1, keepdim=True))
    return (log_norm - logits.gather(-1, targets.unsqueeze(-1))).mean()
''',
        # arguments swapped: KL(Q || P)
        "kl-answer": '''\
def kl_divergence(p, q, base=2.0):
    log_ratio = torch.where(q > 0, torch.log(q) - torch.log(p), torch.zeros_like(q))
    return (q * log_ratio).sum(dim=-1) / math.log(base)
''',
    },
}
