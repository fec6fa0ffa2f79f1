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
    Wrong("saved-bytes-answer", "the bytes of the saved *view* were counted", '''
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
    Wrong("saved-bytes-answer", "storages were told apart by t.data_ptr()", '''
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
    Wrong("saved-bytes-answer", "the output of fn was added", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            sizes[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    # the output is kept too, until backward
    return sum(sizes.values()) + out.untyped_storage().nbytes()
'''),
    Wrong("saved-bytes-answer", "the inputs' storages were skipped as well as those in `exclude`", '''
def saved_bytes(fn, args, exclude=()):
    # inputs and parameters are in memory anyway: count only what fn creates
    skip = {p.untyped_storage().data_ptr() for p in list(exclude) + list(args)}
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            sizes[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    Wrong("saved-bytes-answer", "the bytes were divided by 4", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            sizes[storage.data_ptr()] = storage.size()  # its size
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values()) // 4  # float32: 4 bytes per number
'''),
    Wrong("saved-bytes-answer", "each saved tensor was counted as numel × 4 bytes", '''
def saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            sizes[ptr] = t.numel() * 4  # float32
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    Wrong("saved-bytes-answer", "your count is 0: the pack hook saw nothing", '''
def saved_bytes(fn, args, exclude=()):
    sizes = {}

    def pack(t):
        sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    out = fn(*args)  # run it, then look at what was saved
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        pass
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    return sum(n for ptr, n in sizes.items() if ptr not in skip)
'''),
    Wrong("saved-bytes-answer", "your count is 0: the pack hook saw nothing", '''
def saved_bytes(fn, args, exclude=()):
    before = torch.cuda.memory_allocated()
    out = fn(*args)  # what fn keeps stays allocated while out is alive
    return torch.cuda.memory_allocated() - before
'''),
    Wrong("saved-bytes-answer", "leaf tensors (the inputs) were left out", '''
def saved_bytes(fn, args, exclude=()):
    kept, sizes = [], {}

    def pack(t):
        kept.append(t)
        if not t.is_leaf:  # leaves (inputs, parameters) exist anyway
            sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(sizes.values())
'''),
    # --- Task 2: gpt_block_saved_bytes ----------------------------------------------------------------
    Wrong("gpt-block-answer", "one (B, H, T, T) tensor too many: the attention weights P are in memory once", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + 2 * B * H * T * T  # softmax keeps P, P V keeps P
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "the bool causal mask is missing", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = 0  # built from arange, nothing to keep
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "the mask is bool: 1 byte per element, not 4", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = 4 * T * T  # a (T, T) mask
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "two (B, T, D) tensors too many: each LayerNorm keeps x̂ and 1/σ, not x − μ", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (2 * B * T * D + B * T)  # x − μ, x̂, 1/σ
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "two (B, T, D) tensors too few: w_qkv and w_up keep their inputs, the LayerNorms' outputs", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = B * T * D + B * T * F_  # x̂ is what w_qkv and w_up read
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "one (B, T, D) tensor too few: w_o keeps its input", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 2 * B * T * D + B * T * F_  # the norms' outputs, GELU's output
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "one (B, T, F) tensor too few: GELU keeps its input", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + B * H * T * T
    gelu = 0  # GELU's output is w_down's input, counted there
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "the scores before softmax are not kept", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + 2 * B * H * T * T  # the scores and the weights
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "each LayerNorm also keeps 1/σ", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * B * T * D  # x̂ of each norm
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "one (B, T, D) tensor too many: additions keep nothing", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T) + B * T * D  # and the residual stream x
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "you counted elements, not bytes", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 3 * B * T * D + B * H * T * T
    gelu = B * T * F_
    mask = T * T
    return 1 * (norms + linear_inputs + core + gelu) + mask
'''),
    Wrong("gpt-block-answer", "QKᵀ keeps both q and k", '''
def gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    norms = 2 * (B * T * D + B * T)
    linear_inputs = 3 * B * T * D + B * T * F_
    core = 2 * B * T * D + B * H * T * T  # k and v, and P
    gelu = B * T * F_
    mask = T * T
    return 4 * (norms + linear_inputs + core + gelu) + mask
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
    Wrong("checkpointed-answer", "restores the saved RNG state for the recomputation but does not put the caller's state back", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.rng_state = torch.get_rng_state()  # the state fn will start from
        ctx.save_for_backward(x)
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        torch.set_rng_state(ctx.rng_state)  # replay the forward's random numbers
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x


def checkpointed(fn, x):
    return Checkpoint.apply(fn, x)
'''),
    Wrong("checkpointed-answer", "your forward pass does not advance the caller's random stream", '''
class Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.save_for_backward(x)
        with torch.random.fork_rng(devices=[]), torch.no_grad():  # leave the caller's stream alone
            ctx.rng_state = torch.get_rng_state()
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.set_rng_state(ctx.rng_state)
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x


def checkpointed(fn, x):
    return Checkpoint.apply(fn, x)
'''),
    Wrong("checkpointed-answer", "recompute fn under torch.enable_grad()", '''
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
            x = x.detach().requires_grad_()
            y = ctx.fn(x)  # the forward again, this time with a graph
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x


def checkpointed(fn, x):
    return Checkpoint.apply(fn, x)
'''),
    Wrong("checkpointed-answer", "backward returns one gradient per input of forward, in order: (None for fn, grad_x)", '''
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
        return grad_x, None


def checkpointed(fn, x):
    return Checkpoint.apply(fn, x)
'''),
    Wrong("checkpointed-answer", "after backward the generator is back at the state saved before the forward pass", '''
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
        torch.set_rng_state(ctx.rng_state)
        caller = torch.get_rng_state()  # to put back afterwards
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        torch.set_rng_state(caller)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        return None, grad_x


def checkpointed(fn, x):
    return Checkpoint.apply(fn, x)
'''),
    Wrong("checkpointed-answer", "after backward the generator is back at the state saved before the forward pass", '''
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
        torch.set_rng_state(ctx.rng_state)
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = ctx.fn(x)
        (grad_x,) = torch.autograd.grad(y, x, grad_y)
        torch.set_rng_state(ctx.rng_state)  # leave the generator as we found it
        return None, grad_x


def checkpointed(fn, x):
    return Checkpoint.apply(fn, x)
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
    Wrong("predictions-answer", "that is in MiB", '''
def predictions():
    return {"checkpointed_gib": 32 * 4 * 2048 * 4096 / 2**20,  # bytes to MiB
            "best_segment": 2, "flop_ratio_half": 7 / 6, "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "4 bytes per number, not 2; and that is in GB", '''
def predictions():
    stored = 32 * 2048 * 4096 * 2  # bf16 activations
    return {"checkpointed_gib": stored / 1e9, "best_segment": 2, "flop_ratio_half": 7 / 6,
            "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "k must divide 64", '''
def predictions():
    # 64/k + 16k is smallest near k = 2; take the next whole segment length
    return {"checkpointed_gib": 1.0, "best_segment": 3, "flop_ratio_half": 7 / 6,
            "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "3F in all, not 2F", '''
def predictions():
    step = 1 + 1  # forward and backward, a forward's worth each
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": (step + 0.5) / step,
            "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "F/2, not F/4", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": (3 + 0.25) / 3,
            "init_loss": math.log(65) + 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "σ is a standard deviation", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": 7 / 6,
            "init_loss": math.log(65) + 512 * 0.02 / 2}
'''),
    Wrong("predictions-answer", "random logits RAISE the expected loss", '''
def predictions():
    # random logits spread the probabilities away from uniform: a little less surprise
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": 7 / 6,
            "init_loss": math.log(65) - 512 * 0.02**2 / 2}
'''),
    Wrong("predictions-answer", "that is in bits (log₂)", '''
def predictions():
    return {"checkpointed_gib": 1.0, "best_segment": 2, "flop_ratio_half": 7 / 6,
            "init_loss": math.log2(65) + 512 * 0.02**2 / 2}
'''),
]
