"""Realistic wrong answers for exercise 07 (the decoder block)."""

from . import Wrong

ASSIGNMENT = "07_decoder_block"

_GOOD = '{"silenced_pre_rms": 3.0, "silenced_post_rms": 1.0, "kv_head": 1, "scores_gib": 1.0}'

WRONG = [
    # --- Task 1: res_post_norm_block (extend) -----------------------------------------------------------
    Wrong("res-post-norm-answer", "you built the post-norm block", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = attn_norm(x + attn(x, cos, sin))
    return ffn_norm(h + ffn(h))
'''),
    Wrong("res-post-norm-answer", "you built the pre-norm block", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn(attn_norm(x), cos, sin)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("res-post-norm-answer", "read a normalized copy as well", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn_norm(attn(attn_norm(x), cos, sin))
    return h + ffn_norm(ffn(ffn_norm(h)))
'''),
    Wrong("res-post-norm-answer", "the FFN reads the block's input x", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    a = attn_norm(attn(x, cos, sin))
    f = ffn_norm(ffn(x))
    return x + a + f
'''),
    Wrong("res-post-norm-answer", "the two norms are swapped", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + ffn_norm(attn(x, cos, sin))
    return h + attn_norm(ffn(h))
'''),
    Wrong("res-post-norm-answer", "without the RoPE tables", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn_norm(attn(x))
    return h + ffn_norm(ffn(h))
'''),
    Wrong("res-post-norm-answer", "residual connection around the FFN is missing", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn_norm(attn(x, cos, sin))
    return ffn_norm(ffn(h))
'''),
    Wrong("res-post-norm-answer", "changed its input `x` in place", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    x += attn_norm(attn(x, cos, sin))
    return x + ffn_norm(ffn(x))
'''),
    Wrong("res-post-norm-answer", "the same norm is used twice", '''
def res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn_norm(attn(x, cos, sin))
    return h + attn_norm(ffn(h))
'''),
    # --- Task 2: parallel_block (extend) -----------------------------------------------------------------
    Wrong("parallel-answer", "this is the sequential block", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    h = x + attn(norm(x), cos, sin)
    return h + ffn(norm(h))
'''),
    Wrong("parallel-answer", "the FFN reads x without normalizing it", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    return x + attn(norm(x), cos, sin) + ffn(x)
'''),
    Wrong("parallel-answer", "the two outputs are averaged", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    h = norm(x)
    return x + (attn(h, cos, sin) + ffn(h)) / 2
'''),
    Wrong("parallel-answer", "you normalized the block's output", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    h = norm(x)
    return norm(x + attn(h, cos, sin) + ffn(h))
'''),
    Wrong("parallel-answer", "carries the normalized copy", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    x = norm(x)
    return x + attn(x, cos, sin) + ffn(x)
'''),
    Wrong("parallel-answer", "without the RoPE tables", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    h = norm(x)
    return x + attn(h) + ffn(h)
'''),
    Wrong("parallel-answer", "the residual connection is missing", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    h = norm(x)
    return attn(h, cos, sin) + ffn(h)
'''),
    Wrong("parallel-answer", "un-normalized", '''
def parallel_block(x, norm, attn, ffn, cos, sin):
    a = attn(norm(x), cos, sin)
    return x + a + ffn(x + a)
'''),
    # --- Task 3: pre_norm_block (find and fix) ----------------------------------------------------------
    Wrong("pre-norm-answer", "the bug is not fixed yet", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    normed = ffn_norm(x)
    h = x + attn(normed, cos, sin)
    return h + ffn(attn_norm(h))
'''),
    Wrong("pre-norm-answer", "the FFN reads ffn_norm(h)", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn(attn_norm(x), cos, sin)
    return h + ffn(attn_norm(h))
'''),
    Wrong("pre-norm-answer", "attention reads attn_norm(x), not ffn_norm(x)", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn(ffn_norm(x), cos, sin)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("pre-norm-answer", "you built the post-norm block", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = attn_norm(x + attn(x, cos, sin))
    return ffn_norm(h + ffn(h))
'''),
    Wrong("pre-norm-answer", "the FFN reads the block's input x", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn(attn_norm(x), cos, sin)
    return h + ffn(ffn_norm(x))
'''),
    Wrong("pre-norm-answer", "the first residual starts from the normalised copy", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    x = attn_norm(x)
    h = x + attn(x, cos, sin)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("pre-norm-answer", "you normalised the block's output", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn(attn_norm(x), cos, sin)
    return ffn_norm(h + ffn(ffn_norm(h)))
'''),
    Wrong("pre-norm-answer", "without the RoPE tables", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn(attn_norm(x))
    return h + ffn(ffn_norm(h))
'''),
    Wrong("pre-norm-answer", "uses `course_lib.block.TransformerBlock`", '''
def pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    config = ModelConfig(vocab_size=1, d_model=x.shape[-1], n_layers=1, n_heads=attn.n_heads,
                         n_kv_heads=attn.n_kv_heads, head_dim=attn.head_dim, d_ff=1,
                         positional="rope" if cos is not None else "none")
    block = TransformerBlock(config).to(x.dtype)
    block.attn_norm, block.attn, block.ffn_norm, block.ffn = attn_norm, attn, ffn_norm, ffn
    return block(x, cos, sin)
'''),
    # --- Task 4: predictions ------------------------------------------------------------------------------
    Wrong("predictions-answer", "never normalizes the stream", f'''
def predictions():
    return {{**{_GOOD}, "silenced_pre_rms": 1.0}}
'''),
    Wrong("predictions-answer", "the skip connections still carry x", f'''
def predictions():
    return {{**{_GOOD}, "silenced_pre_rms": 0.0}}
'''),
    Wrong("predictions-answer", "even when the sublayer adds nothing", f'''
def predictions():
    return {{**{_GOOD}, "silenced_post_rms": 3.0}}
'''),
    Wrong("predictions-answer", "consecutive query heads share", f'''
def predictions():
    return {{**{_GOOD}, "kv_head": 6 % 2}}
'''),
    Wrong("predictions-answer", "divide by the group size", f'''
def predictions():
    return {{**{_GOOD}, "kv_head": 6 // 2}}
'''),
    Wrong("predictions-answer", "2 bytes per number, not 4", f'''
def predictions():
    return {{**{_GOOD}, "scores_gib": 32 * 4096 * 4096 * 4 / 2 ** 30}}
'''),
    Wrong("predictions-answer", "for every head", f'''
def predictions():
    return {{**{_GOOD}, "scores_gib": 4096 * 4096 * 2 / 2 ** 30}}
'''),
    Wrong("predictions-answer", "should be a number", f'''
def predictions():
    return {{**{_GOOD}, "kv_head": "head 1"}}
'''),
    Wrong("predictions-answer", None, f'''
def predictions():
    return {{**{_GOOD}, "scores_gib": 8.0}}
'''),
]
