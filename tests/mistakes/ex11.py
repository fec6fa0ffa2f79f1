"""Realistic wrong answers for exercise 11 (memory in training)."""

from . import Wrong

ASSIGNMENT = "11_memory_in_training"

_CORRECT_BACKWARD = '''
    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.set_rng_state(ctx.rng_state)
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x
'''

_CHECKPOINTED = '''

def checkpointed(fn, x):
    return Checkpoint.apply(fn, x)
'''

WRONG = [
    # --- Task 1: saved_bytes --------------------------------------------------------------------------
    Wrong("saved-bytes-answer", "recognised by identity", '''
def saved_bytes(fn, args, exclude=()):
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        if not any(t is p for p in exclude):
            sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    Wrong("saved-bytes-answer", "parameters were counted", '''
def saved_bytes(fn, args, exclude=()):
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    Wrong("saved-bytes-answer", "only floating-point tensors were counted", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        ptr = t.untyped_storage().data_ptr()
        if t.is_floating_point() and ptr not in skip:  # activations are floats
            sizes[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    Wrong("saved-bytes-answer", "bytes of the saved *view* were counted", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            sizes[ptr] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    Wrong("saved-bytes-answer", "was counted each time", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    total = 0
    kept = []

    def pack(t):
        nonlocal total
        kept.append(t)
        if t.untyped_storage().data_ptr() not in skip:
            total += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return total
'''),
    Wrong("saved-bytes-answer", "was counted each time", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    sizes = {}  # one entry per saved tensor

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            sizes[id(t)] = (t, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(n for _, n in sizes.values())
'''),
    Wrong("saved-bytes-answer", "every time it was saved", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(t.numel() * t.element_size() for t in saved
               if t.untyped_storage().data_ptr() not in skip)
'''),
    Wrong("saved-bytes-answer", "counted each time", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        if t.untyped_storage().data_ptr() not in skip:
            sizes[t.data_ptr()] = t.untyped_storage().nbytes()  # one entry per address
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    Wrong("saved-bytes-answer", "course_lib.checkpointing", '''
from course_lib import checkpointing


def saved_bytes(fn, args, exclude=()):
    with checkpointing.SavedTensorLog(exclude=exclude) as log:
        out = fn(*args)
    return log.nbytes
'''),
    # --- Task 2: gpt_block_saved_bytes ----------------------------------------------------------------
    Wrong("gpt-block-answer", "keeps x − μ twice", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (3 * B * T * D + B * T)  # like RMSNorm: input, 1/σ, x̂, output
    attention = 4 * B * T * D + 2 * B * H * T * T
    ffn = 2 * B * T * F_
    return 4 * (norms + attention + ffn) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "also keeps 1/σ", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * 4 * B * T * D
    attention = 4 * B * T * D + 2 * B * H * T * T
    ffn = 2 * B * T * F_
    return 4 * (norms + attention + ffn) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "It has no gate", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 4 * B * T * D + 2 * B * H * T * T
    ffn = 4 * B * T * F_  # as in the chapter's block
    return 4 * (norms + attention + ffn) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "GELU's input (for its derivative) and its output", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 4 * B * T * D + 2 * B * H * T * T
    ffn = B * T * F_  # GELU keeps its input
    return 4 * (norms + attention + ffn) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "keeps two (B, H, T, T) tensors", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 4 * B * T * D + B * H * T * T  # the attention weights
    ffn = 2 * B * T * F_
    return 4 * (norms + attention + ffn) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "two bool causal masks are missing", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 4 * B * T * D + 2 * B * H * T * T
    ffn = 2 * B * T * F_
    return 4 * (norms + attention + ffn)
'''),
    Wrong("gpt-block-answer", "input of w_o", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 3 * B * T * D + 2 * B * H * T * T  # q, k, v and the weights
    ffn = 2 * B * T * F_
    return 4 * (norms + attention + ffn) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "no cos and sin tables", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 4 * B * T * D + 2 * B * H * T * T
    rope = T * (D // H)
    ffn = 2 * B * T * F_
    return 4 * (norms + attention + rope + ffn) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "counted elements, not bytes", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 4 * B * T * D + 2 * B * H * T * T + 2 * T * T
    ffn = 2 * B * T * F_
    return norms + attention + ffn
'''),
    Wrong("gpt-block-answer", "parameters (weights and biases) were counted", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (4 * B * T * D + B * T)
    attention = 4 * B * T * D + 2 * B * H * T * T
    ffn = 2 * B * T * F_
    weights = 4 * (D * D + D) + (D * F_ + F_) + (F_ * D + D) + 2 * 2 * D  # needed by backward
    return 4 * (norms + attention + ffn + weights) + 2 * T * T
'''),
    Wrong("gpt-block-answer", "building an nn.Module", '''
from course_lib.block import TransformerBlock


def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    block = TransformerBlock(gpt_config(d_model, n_heads, d_ff))
    x = torch.randn(batch, seq_len, d_model, requires_grad=True)
    return saved_bytes(lambda a: block(a, implementation="reference"), (x,),
                       tuple(block.parameters()))
'''),
    # --- Task 3: checkpointed ---------------------------------------------------------------------------
    Wrong("checkpointed-answer", "draws new random numbers", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.save_for_backward(x)
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x
''' + _CHECKPOINTED),
    Wrong("checkpointed-answer", "draws new random numbers", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.save_for_backward(x)
        with torch.no_grad():
            y = fn(x)
        ctx.rng_state = torch.get_rng_state()  # the state fn ran with
        return y
''' + _CORRECT_BACKWARD + _CHECKPOINTED),
    Wrong("checkpointed-answer", "reseeded (with a fixed number)", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.save_for_backward(x)
        torch.manual_seed(0)  # the same masks every time
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        torch.manual_seed(0)
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x
''' + _CHECKPOINTED),
    Wrong("checkpointed-answer", "reseeded with its initial seed", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.save_for_backward(x)
        torch.manual_seed(torch.initial_seed())
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        torch.manual_seed(torch.initial_seed())  # replay the same random numbers
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x
''' + _CHECKPOINTED),
    Wrong("checkpointed-answer", "so it saves no memory", '''
class Checkpoint(torch.autograd.Function):
    pass


def checkpointed(fn, x):
    # autograd recomputes nothing and gets the masks right
    return fn(x)
'''),
    Wrong("checkpointed-answer", "returns grad_y itself", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.rng_state = torch.get_rng_state()
        ctx.save_for_backward(x)
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(ctx.rng_state)
            y = ctx.fn(x)  # rebuild the activations
        return None, grad_y
''' + _CHECKPOINTED),
    Wrong("checkpointed-answer", "incorrect number of gradients", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.rng_state = torch.get_rng_state()
        ctx.save_for_backward(x)
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.set_rng_state(ctx.rng_state)
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return grad_x
''' + _CHECKPOINTED),
    Wrong("checkpointed-answer", "torch.utils.checkpoint.checkpoint", '''
from torch.utils.checkpoint import checkpoint as _checkpoint


class Checkpoint(torch.autograd.Function):
    pass


def checkpointed(fn, x):
    return _checkpoint(fn, x, use_reentrant=False)
'''),
    # --- Task 4: predictions ------------------------------------------------------------------------------
    Wrong("predictions-answer", "4 bytes per number, not 2", '''
def predictions():
    return {"checkpointed_gib": 32 * 2 * 2048 * 4096 / 2**30, "best_segment": 2,
            "flop_ratio_half": 7 / 6, "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "that is in GB", '''
def predictions():
    return {"checkpointed_gib": 32 * 4 * 2048 * 4096 / 1e9, "best_segment": 2,
            "flop_ratio_half": 7 / 6, "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "IS the next block's input", '''
def predictions():
    # each block keeps its input and its output
    return {"checkpointed_gib": 2 * 32 * 4 * 2048 * 4096 / 2**30, "best_segment": 2,
            "flop_ratio_half": 7 / 6, "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "√N is the answer when", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": math.sqrt(64), "flop_ratio_half": 7 / 6,
            "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "when EVERY block is checkpointed", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": 4 / 3,
            "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "checkpointing does not double a step", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": 2.0,
            "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "ln V is the loss of a model whose logits are all equal", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": 7 / 6,
            "init_loss": math.log(65)}
'''),
    Wrong("predictions-answer", "HALF of it", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": 7 / 6,
            "init_loss": math.log(65) + 512 * 0.02**2}
'''),
]
