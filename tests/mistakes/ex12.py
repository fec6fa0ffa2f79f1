"""Realistic wrong answers for exercise 12 (training the model)."""

from . import Wrong

ASSIGNMENT = "12_training"

WRONG = [
    # --- Task 1: train_step -----------------------------------------------------------------------------
    Wrong("train-step-answer", "the gradients reach the optimizer unclipped", '''
def train_step(model, optimizer, x, y, max_norm):
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "the gradients reach the optimizer unclipped", '''
def train_step(model, optimizer, x, y, max_norm):
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    optimizer.step()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
    if norm > max_norm:  # keep the gradients small
        for g in grads:
            g *= max_norm / norm
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "clipped by its own norm", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    for p in model.parameters():
        if p.grad is not None:
            norm = p.grad.norm()
            if norm > max_norm:
                p.grad *= max_norm / norm
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "even when their norm is already smaller", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    for g in grads:
        g.mul_(max_norm / total)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "adds the parameters' norms", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = sum(g.norm() for g in grads)
    scale = min(1.0, max_norm / total.item())
    for g in grads:
        g.mul_(scale)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "the square root is missing", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = sum((g * g).sum() for g in grads)
    if total > max_norm:
        for g in grads:
            g.mul_(max_norm / total)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "the gradients are never cleared", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    optimizer.step()
    return loss.item()
'''),
    Wrong("train-step-answer", "cleared between backward() and optimizer.step()", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    optimizer.zero_grad()
    optimizer.step()
    return loss.item()
'''),
    Wrong("train-step-answer", "the loss is summed over the B·T positions", '''
def train_step(model, optimizer, x, y, max_norm):
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "the targets are shifted once more", '''
def train_step(model, optimizer, x, y, max_norm):
    logits = model(x)[:, :-1]  # position t predicts token t + 1
    targets = y[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "clipping by value", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "which does the work this task asks you to do", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=False)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
'''),
    Wrong("train-step-answer", "which does the work this task asks you to do", '''
from course_lib.training import train_step as _course_step

def train_step(model, optimizer, x, y, max_norm):
    return _course_step(model, optimizer, x, y, lr=optimizer.param_groups[0]["lr"],
                        grad_clip=max_norm).item()
'''),
    Wrong("train-step-answer", "it should return the batch's loss as a number", '''
def train_step(model, optimizer, x, y, max_norm):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    optimizer.step()
    optimizer.zero_grad()
    return {"loss": loss.item(), "grad_norm": norm.item()}
'''),
    # --- Task 2: learning_rate --------------------------------------------------------------------------
    Wrong("learning-rate-answer", "the warmup starts at 0", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step > total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))
'''),
    Wrong("learning-rate-answer", "the warmup divides by warmup_steps + 1", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    # as in nanoGPT's train.py
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step > total_steps:
        return min_lr
    decay_ratio = (step - warmup_steps) / (total_steps - warmup_steps)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (max_lr - min_lr)
'''),
    Wrong("learning-rate-answer", "the cosine is measured from step 0", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * step / total_steps))
'''),
    Wrong("learning-rate-answer", "the cosine's progress divides by total_steps", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    t = (step - warmup_steps) / total_steps
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2
'''),
    Wrong("learning-rate-answer", "decays to 0 instead of min_lr", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return max_lr * 0.5 * (1 + math.cos(math.pi * progress))
'''),
    Wrong("learning-rate-answer", "so the peak is max_lr + min_lr", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * max_lr * (1 + math.cos(math.pi * progress))
'''),
    Wrong("learning-rate-answer", "the decay is linear", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return max_lr + (min_lr - max_lr) * progress
'''),
    Wrong("learning-rate-answer", "the cosine climbs back up", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))
'''),
    Wrong("learning-rate-answer", "a quarter period", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * math.cos(math.pi / 2 * progress)
'''),
    Wrong("learning-rate-answer", "which does the work this task asks you to do", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=max_lr)
    warm = torch.optim.lr_scheduler.LinearLR(opt, 1 / max(warmup_steps, 1), 1.0, max(warmup_steps, 1))
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total_steps - warmup_steps, min_lr)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], [warmup_steps])
    for _ in range(step):
        opt.step()
        sched.step()
    return opt.param_groups[0]["lr"]
'''),
    Wrong("learning-rate-answer", "it should return the learning rate (a Python number)", '''
def learning_rate(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return torch.tensor(max_lr * (step + 1) / warmup_steps)
    progress = torch.tensor(min(step - warmup_steps, total_steps - warmup_steps)
                            / (total_steps - warmup_steps))
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + torch.cos(math.pi * progress))
'''),
    # --- Task 3: sampling_probs -------------------------------------------------------------------------
    Wrong("sampling-probs-answer", "the temperature multiplies the logits", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits * temperature, dim=-1)
    if top_k is not None:
        kth = torch.topk(probs, min(top_k, probs.shape[-1]), dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        ranked, order = torch.sort(probs, dim=-1, descending=True)
        keep_ranked = ranked.cumsum(-1) - ranked < top_p
        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs
'''),
    Wrong("sampling-probs-answer", "top-k keeps one token too few", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z <= kth, float("-inf"))
    probs = torch.softmax(z, dim=-1)
    if top_p is not None:
        ranked, order = torch.sort(probs, dim=-1, descending=True)
        keep_ranked = ranked.cumsum(-1) - ranked < top_p
        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs
'''),
    Wrong("sampling-probs-answer", "the nucleus stops one token short", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        ranked, order = torch.sort(probs, dim=-1, descending=True)
        remove = ranked.cumsum(-1) > top_p
        remove[..., 0] = False  # always keep the most probable token
        probs = probs.scatter(-1, order, ranked.masked_fill(remove, 0.0))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs
'''),
    Wrong("sampling-probs-answer", "the running total is taken in token order", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        mass_before = probs.cumsum(-1) - probs
        probs = torch.where(mass_before < top_p, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs
'''),
    Wrong("sampling-probs-answer", "before top-k renormalised them", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits / temperature, dim=-1)
    keep = torch.ones_like(probs, dtype=torch.bool)
    if top_p is not None:
        ranked, order = torch.sort(probs, dim=-1, descending=True)
        nucleus = ranked.cumsum(-1) - ranked < top_p
        keep &= torch.zeros_like(nucleus).scatter(-1, order, nucleus)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        keep &= probs >= kth
    probs = torch.where(keep, probs, 0.0)
    return probs / probs.sum(-1, keepdim=True)
'''),
    Wrong("sampling-probs-answer", "before the temperature is applied", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits.clone()
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z[z < kth] = float("-inf")
    if top_p is not None:
        ranked, order = torch.sort(torch.softmax(z, -1), dim=-1, descending=True)
        drop = ranked.cumsum(-1) - ranked >= top_p
        z = z.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return torch.softmax(z / temperature, dim=-1)
'''),
    Wrong("sampling-probs-answer", "not renormalised", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits / temperature, dim=-1)
    keep = torch.ones_like(probs, dtype=torch.bool)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        keep = probs >= kth
    if top_p is not None:
        ranked, order = torch.sort(probs * keep, dim=-1, descending=True)
        nucleus = ranked.cumsum(-1) - ranked < top_p * (probs * keep).sum(-1, keepdim=True)
        keep = keep & torch.zeros_like(nucleus).scatter(-1, order, nucleus)
    return probs * keep
'''),
    Wrong("sampling-probs-answer", "top_p is ignored", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs
'''),
    Wrong("sampling-probs-answer", "you returned log-probabilities", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        ranked, order = torch.sort(torch.softmax(z, -1), dim=-1, descending=True)
        drop = ranked.cumsum(-1) - ranked >= top_p
        z = z.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return torch.log_softmax(z, dim=-1)
'''),
    Wrong("sampling-probs-answer", "the softmax normalises over the first dimension", '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = F.softmax(logits / temperature, dim=0)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        ranked, order = torch.sort(probs, dim=-1, descending=True)
        keep_ranked = ranked.cumsum(-1) - ranked < top_p
        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs
'''),
    Wrong("sampling-probs-answer", "which does the work this task asks you to do", '''
from course_lib.sampling import sampling_probs as _course_probs

def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    return _course_probs(logits, temperature, top_k, top_p).to(logits.dtype)
'''),
    Wrong("sampling-probs-answer", None, '''
def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        ranked, order = torch.sort(torch.softmax(z, -1), dim=-1, descending=True)
        drop = ranked.cumsum(-1) - ranked >= top_p
        z = z.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return z  # the filtered logits, ready for torch.multinomial(z.softmax(-1), 1)
'''),
    # --- Task 4: evaluate_loss ---------------------------------------------------------------------------
    Wrong("evaluate-loss-answer", "this is still what the given version computes", '''
def evaluate_loss(model, data, context, batch_size):
    n_windows = (len(data) - 1) // context
    inputs = data[: n_windows * context].view(n_windows, context)
    targets = data[1 : n_windows * context + 1].view(n_windows, context)
    losses = []
    with torch.no_grad():
        for start in range(0, n_windows, batch_size):
            logits = model(inputs[start : start + batch_size])
            y = targets[start : start + batch_size]
            losses.append(F.cross_entropy(logits.flatten(0, 1), y.flatten()))
    return torch.stack(losses).mean().item()
'''),
    Wrong("evaluate-loss-answer", "the last, smaller batch is left out", '''
def evaluate_loss(model, data, context, batch_size):
    n_windows = (len(data) - 1) // context
    inputs = data[: n_windows * context].view(n_windows, context)
    targets = data[1 : n_windows * context + 1].view(n_windows, context)
    batch_losses = []
    with torch.no_grad():
        for start in range(0, n_windows - batch_size + 1, batch_size):  # full batches only
            x = inputs[start : start + batch_size]
            y = targets[start : start + batch_size]
            batch_losses.append(F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item())
    return sum(batch_losses) / len(batch_losses)
'''),
    Wrong("evaluate-loss-answer", "divided by the number of batches", '''
def evaluate_loss(model, data, context, batch_size):
    n_windows = (len(data) - 1) // context
    inputs = data[: n_windows * context].view(n_windows, context)
    targets = data[1 : n_windows * context + 1].view(n_windows, context)
    total, n_batches = 0.0, 0
    with torch.no_grad():
        for start in range(0, n_windows, batch_size):
            x = inputs[start : start + batch_size]
            y = targets[start : start + batch_size]
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            n_batches += 1
    return total / n_batches
'''),
    Wrong("evaluate-loss-answer", "divided by the number of windows", '''
def evaluate_loss(model, data, context, batch_size):
    n_windows = (len(data) - 1) // context
    inputs = data[: n_windows * context].view(n_windows, context)
    targets = data[1 : n_windows * context + 1].view(n_windows, context)
    total = 0.0
    with torch.no_grad():
        for start in range(0, n_windows, batch_size):
            x = inputs[start : start + batch_size]
            y = targets[start : start + batch_size]
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
    return total / n_windows
'''),
    Wrong("evaluate-loss-answer", "the windows overlap", '''
def evaluate_loss(model, data, context, batch_size):
    starts = torch.arange(len(data) - context)  # every window of the split
    inputs = torch.stack([data[s : s + context] for s in starts])
    targets = torch.stack([data[s + 1 : s + context + 1] for s in starts])
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(starts), batch_size):
            x, y = inputs[i : i + batch_size], targets[i : i + batch_size]
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    return total / count
'''),
    Wrong("evaluate-loss-answer", "the targets are the inputs themselves", '''
def evaluate_loss(model, data, context, batch_size):
    n_windows = (len(data) - 1) // context
    windows = data[: n_windows * context].view(n_windows, context)
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, n_windows, batch_size):
            x = windows[start : start + batch_size]
            total += F.cross_entropy(model(x).flatten(0, 1), x.flatten(), reduction="sum").item()
            count += x.numel()
    return total / count
'''),
    Wrong("evaluate-loss-answer", "the result is in bits", '''
def evaluate_loss(model, data, context, batch_size):
    n_windows = (len(data) - 1) // context
    inputs = data[: n_windows * context].view(n_windows, context)
    targets = data[1 : n_windows * context + 1].view(n_windows, context)
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, n_windows, batch_size):
            x = inputs[start : start + batch_size]
            y = targets[start : start + batch_size]
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    return total / count / math.log(2)  # bits per character, as in the chapter
'''),
    Wrong("evaluate-loss-answer", "which does the work this task asks you to do", '''
from course_lib.data import eval_windows

def evaluate_loss(model, data, context, batch_size):
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in eval_windows(data, batch_size, context):
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    return total / count
'''),
    # --- Task 5: predictions ----------------------------------------------------------------------------
    Wrong("predictions-answer", "that is in bits", '''
def predictions():
    return {"initial_loss": math.log2(65), "bits_per_char": 1.40 / math.log(2),
            "perplexity": math.exp(1.40), "adam_clip_ratio": 1.0, "top_p_tokens": 3}
'''),
    Wrong("predictions-answer", "65 is the perplexity of that model", '''
def predictions():
    return {"initial_loss": 65, "bits_per_char": 1.40 / math.log(2),
            "perplexity": math.exp(1.40), "adam_clip_ratio": 1.0, "top_p_tokens": 3}
'''),
    Wrong("predictions-answer", "you multiplied by ln 2", '''
def predictions():
    return {"initial_loss": math.log(65), "bits_per_char": 1.40 * math.log(2),
            "perplexity": math.exp(1.40), "adam_clip_ratio": 1.0, "top_p_tokens": 3}
'''),
    Wrong("predictions-answer", "2 to the power of the loss is right only for a loss in bits", '''
def predictions():
    return {"initial_loss": math.log(65), "bits_per_char": 1.40 / math.log(2),
            "perplexity": 2 ** 1.40, "adam_clip_ratio": 1.0, "top_p_tokens": 3}
'''),
    Wrong("predictions-answer", "a constant factor cancels", '''
def predictions():
    return {"initial_loss": math.log(65), "bits_per_char": 1.40 / math.log(2),
            "perplexity": math.exp(1.40), "adam_clip_ratio": 0.1, "top_p_tokens": 3}
'''),
    Wrong("predictions-answer", "0.4 + 0.3 is still below 0.75", '''
def predictions():
    return {"initial_loss": math.log(65), "bits_per_char": 1.40 / math.log(2),
            "perplexity": math.exp(1.40), "adam_clip_ratio": 1.0, "top_p_tokens": 2}
'''),
    Wrong("predictions-answer", "stops as soon as the total reaches p", '''
def predictions():
    return {"initial_loss": math.log(65), "bits_per_char": 1.40 / math.log(2),
            "perplexity": math.exp(1.40), "adam_clip_ratio": 1.0, "top_p_tokens": 4}
'''),
    Wrong("predictions-answer", "has no value for", '''
def predictions():
    return {"initial_loss": math.log(65), "bits_per_char": 1.40 / math.log(2),
            "perplexity": math.exp(1.40), "adam_ratio": 1.0, "top_p_tokens": 3}
'''),
    # --- Task 6: paired_interval ----------------------------------------------------------------------
    Wrong("paired-interval-answer", "compared as independent samples", '''
def paired_interval(a, b, confidence=0.95):
    n = len(a)
    mean_a, mean_b = sum(a) / n, sum(b) / n
    var_a = sum((x - mean_a) ** 2 for x in a) / (n - 1)
    var_b = sum((x - mean_b) ** 2 for x in b) / (n - 1)
    se = math.sqrt(var_a / n + var_b / n)  # Welch's standard error
    half = t_quantile(0.5 + confidence / 2, 2 * n - 2) * se
    diff = mean_a - mean_b
    return diff - half, diff + half, diff - half > 0 or diff + half < 0
'''),
    Wrong("paired-interval-answer", "compared as independent samples", '''
import numpy as np

def paired_interval(a, b, confidence=0.95):
    a, b = np.array(a), np.array(b)
    n = len(a)
    diff = a.mean() - b.mean()
    se = np.sqrt(a.var(ddof=1) / n + b.var(ddof=1) / n)
    half = t_quantile(0.5 + confidence / 2, n - 1) * se
    return float(diff - half), float(diff + half), bool(abs(diff) > half)
'''),
    Wrong("paired-interval-answer", "1.96 is the normal distribution's quantile", '''
def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = 1.96 * s / math.sqrt(n)  # 95 %
    return mean - half, mean + half, mean - half > 0 or mean + half < 0
'''),
    Wrong("paired-interval-answer", "the population formula", '''
import numpy as np

def paired_interval(a, b, confidence=0.95):
    d = np.array(a) - np.array(b)
    n = len(d)
    half = t_quantile(0.5 + confidence / 2, n - 1) * d.std() / np.sqrt(n)
    low, high = d.mean() - half, d.mean() + half
    return float(low), float(high), bool(low > 0 or high < 0)
'''),
    Wrong("paired-interval-answer", "the standard error is divided by n", '''
def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * s / n
    return mean - half, mean + half, mean - half > 0 or mean + half < 0
'''),
    Wrong("paired-interval-answer", "has n degrees of freedom", '''
def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n) * s / math.sqrt(n)
    return mean - half, mean + half, mean - half > 0 or mean + half < 0
'''),
    Wrong("paired-interval-answer", "the quantile is one-sided", '''
def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(confidence, n - 1) * s / math.sqrt(n)
    return mean - half, mean + half, mean - half > 0 or mean + half < 0
'''),
    Wrong("paired-interval-answer", "the confidence argument is ignored", '''
def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(0.975, n - 1) * s / math.sqrt(n)  # two-sided 95 %
    return mean - half, mean + half, mean - half > 0 or mean + half < 0
'''),
    Wrong("paired-interval-answer", "this is the interval of b − a", '''
def paired_interval(a, b, confidence=0.95):
    d = [y - x for x, y in zip(a, b)]  # how much B improves on A
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * s / math.sqrt(n)
    return mean - half, mean + half, mean - half > 0 or mean + half < 0
'''),
    Wrong("paired-interval-answer", "the two rows' own intervals overlap", '''
def paired_interval(a, b, confidence=0.95):
    n = len(a)
    q = t_quantile(0.5 + confidence / 2, n - 1)

    def interval(xs):
        m = sum(xs) / n
        s = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
        return m - q * s / math.sqrt(n), m + q * s / math.sqrt(n)

    low, high = interval([x - y for x, y in zip(a, b)])
    a_low, a_high = interval(a)
    b_low, b_high = interval(b)
    found = a_high < b_low or b_high < a_low  # the two rows' intervals do not overlap
    return low, high, found
'''),
    Wrong("paired-interval-answer", "is inverted", '''
def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * s / math.sqrt(n)
    return mean - half, mean + half, mean - half <= 0 <= mean + half
'''),
    Wrong("paired-interval-answer", "only counts one direction", '''
def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * s / math.sqrt(n)
    return mean - half, mean + half, mean - half > 0
'''),
    Wrong("paired-interval-answer", "which does the work this task asks you to do", '''
import statistics

def paired_interval(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    half = t_quantile(0.5 + confidence / 2, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    m = statistics.mean(d)
    return m - half, m + half, m - half > 0 or m + half < 0
'''),
    Wrong("paired-interval-answer", "course_lib.experiments.stats.paired_difference", '''
from course_lib.experiments import paired_difference

def paired_interval(a, b, confidence=0.95):
    out = paired_difference(a, b, confidence)
    return out["low"], out["high"], out["found"]
'''),
    # --- Task 7: ablated_loss -------------------------------------------------------------------------
    Wrong("ablated-loss-answer", "W_o's rows", '''
def ablated_loss(model, ids, heads):
    saved = {}
    with torch.no_grad():
        for layer, h in heads:
            w = model.blocks[layer].attn.w_o.weight
            d = model.blocks[layer].attn.head_dim
            saved.setdefault(layer, w.clone())
            w[h * d:(h + 1) * d, :] = 0  # head h's block of W_o
        logits = model(ids)
        for layer, w in saved.items():
            model.blocks[layer].attn.w_o.weight.copy_(w)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "the head's queries were zeroed", '''
def ablated_loss(model, ids, heads):
    saved = {}
    with torch.no_grad():
        for layer, h in heads:
            attn = model.blocks[layer].attn
            d = attn.head_dim
            saved.setdefault(layer, attn.w_qkv.weight.clone())
            attn.w_qkv.weight[h * d:(h + 1) * d] = 0  # the head's query: it looks at nothing
        logits = model(ids)
        for layer, w in saved.items():
            model.blocks[layer].attn.w_qkv.weight.copy_(w)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "was taken as key/value head h", '''
def ablated_loss(model, ids, heads):
    saved = {}
    with torch.no_grad():
        for layer, h in heads:
            attn = model.blocks[layer].attn
            d = attn.head_dim
            saved.setdefault(layer, attn.w_qkv.weight.clone())
            start = (attn.n_heads + attn.n_kv_heads + h) * d  # head h's values
            attn.w_qkv.weight[start:start + d] = 0
        logits = model(ids)
        for layer, w in saved.items():
            model.blocks[layer].attn.w_qkv.weight.copy_(w)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "was mapped to its key/value head", '''
def ablated_loss(model, ids, heads):
    saved = {}
    with torch.no_grad():
        for layer, h in heads:
            attn = model.blocks[layer].attn
            d = attn.head_dim
            saved.setdefault(layer, attn.w_qkv.weight.clone())
            g = h // (attn.n_heads // attn.n_kv_heads)  # the key/value head that head h reads
            start = (attn.n_heads + attn.n_kv_heads + g) * d
            attn.w_qkv.weight[start:start + d] = 0  # its values
        logits = model(ids)
        for layer, w in saved.items():
            model.blocks[layer].attn.w_qkv.weight.copy_(w)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "was taken as key/value head h", '''
def ablated_loss(model, ids, heads):
    handles = []
    for layer, h in heads:
        attn = model.blocks[layer].attn
        size = attn.w_o.in_features // attn.n_kv_heads  # one slice per key/value head

        def hook(module, args, h=h, size=size):
            x = args[0].clone()
            x[..., h * size:(h + 1) * size] = 0
            return (x,)

        handles.append(attn.w_o.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "d_model / n_heads", '''
def ablated_loss(model, ids, heads):
    d = model.config.d_model // model.config.n_heads  # the width of a head
    handles = []
    for layer, h in heads:
        def hook(module, args, h=h):
            x = args[0].clone()
            x[..., h * d:(h + 1) * d] = 0
            return (x,)

        handles.append(model.blocks[layer].attn.w_o.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "left a hook registered", '''
def ablated_loss(model, ids, heads):
    for layer, h in heads:
        attn = model.blocks[layer].attn
        d = attn.head_dim

        def hook(module, args, h=h, d=d):
            x = args[0].clone()
            x[..., h * d:(h + 1) * d] = 0
            return (x,)

        attn.w_o.register_forward_pre_hook(hook)
    with torch.no_grad():
        logits = model(ids)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "left the model's weights changed", '''
def ablated_loss(model, ids, heads):
    with torch.no_grad():
        for layer, h in heads:
            attn = model.blocks[layer].attn
            d = attn.head_dim
            attn.w_o.weight[:, h * d:(h + 1) * d] = 0  # head h's columns of W_o
        logits = model(ids)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "at their own positions", '''
def ablated_loss(model, ids, heads):
    saved = {}
    with torch.no_grad():
        for layer, h in heads:
            attn = model.blocks[layer].attn
            d = attn.head_dim
            saved.setdefault(layer, attn.w_o.weight.clone())
            attn.w_o.weight[:, h * d:(h + 1) * d] = 0
        logits = model(ids)
        for layer, w in saved.items():
            model.blocks[layer].attn.w_o.weight.copy_(w)
    return F.cross_entropy(logits.flatten(0, 1), ids.flatten()).item()
'''),
    Wrong("ablated-loss-answer", "only the first head of the list", '''
def ablated_loss(model, ids, heads):
    handles = []
    try:
        for layer, h in heads:
            attn = model.blocks[layer].attn
            d = attn.head_dim

            def hook(module, args, h=h, d=d):
                x = args[0].clone()
                x[..., h * d:(h + 1) * d] = 0
                return (x,)

            handles.append(attn.w_o.register_forward_pre_hook(hook))
            with torch.no_grad():
                logits = model(ids)
            return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
    finally:
        for handle in handles:
            handle.remove()
    with torch.no_grad():
        logits = model(ids)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "Python closures bind late", '''
def ablated_loss(model, ids, heads):
    handles = []
    for layer, h in heads:
        attn = model.blocks[layer].attn
        d = attn.head_dim
        handles.append(attn.w_o.register_forward_pre_hook(
            lambda module, args: (args[0].index_fill(-1, torch.arange(h * d, (h + 1) * d), 0),)))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "mean ablation", '''
def ablated_loss(model, ids, heads):
    handles = []
    for layer, h in heads:
        attn = model.blocks[layer].attn
        d = attn.head_dim

        def hook(module, args, h=h, d=d):
            x = args[0].clone()
            part = x[..., h * d:(h + 1) * d]
            x[..., h * d:(h + 1) * d] = part.mean(dim=(0, 1))  # the head's average output
            return (x,)

        handles.append(attn.w_o.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "no head was switched off", '''
def ablated_loss(model, ids, heads):
    handles = []
    for layer, h in heads:
        attn = model.blocks[layer].attn
        d = attn.head_dim

        def hook(module, args, h=h, d=d):
            x = args[0].clone()
            x[..., h * d:(h + 1) * d] = 0

        handles.append(attn.w_o.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
    Wrong("ablated-loss-answer", "a Python number", '''
def ablated_loss(model, ids, heads):
    handles = []
    for layer, h in heads:
        attn = model.blocks[layer].attn
        d = attn.head_dim

        def hook(module, args, h=h, d=d):
            x = args[0].clone()
            x[..., h * d:(h + 1) * d] = 0
            return (x,)

        handles.append(attn.w_o.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
'''),
    Wrong("ablated-loss-answer", "course_lib.heads.ablate_heads", '''
from course_lib.heads import ablate_heads

def ablated_loss(model, ids, heads):
    with torch.no_grad(), ablate_heads(model, heads):
        logits = model(ids)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
'''),
]
