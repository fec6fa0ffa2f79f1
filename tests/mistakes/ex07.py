"""Realistic wrong answers for exercise 07 (the decoder block)."""

from . import Wrong

ASSIGNMENT = "07_decoder_block"

_GOOD = ('{"res_post_rms": 11 ** 0.5, "post_block_gain": 0.25, "silenced_post_rank": 63, '
         '"packed_allowed": 21}')

# The RMSNorm backward pass a student writes once and reuses (tasks 2 and 3).
_NORM_BACKWARD = '''
def norm_backward(norm, v, g):
    r = torch.sqrt(v.pow(2).mean(-1, keepdim=True) + norm.eps)
    v_hat = v / r
    wg = norm.weight * g
    return (wg - v_hat * (v_hat * wg).mean(-1, keepdim=True)) / r
'''

WRONG = [
    # --- Task 1: packed_block (find and fix) ---------------------------------------------------------------
    Wrong("packed-answer", "still what the given version computes", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    h = x + attn(attn_norm(x), cos, sin, same_doc[:, None])
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "plain causal over the whole row", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    # attention is causal by default: no mask needed
    h = x + attn(attn_norm(x), cos, sin)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "OR to every earlier position", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    T = x.shape[1]
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    mask = (same_doc | causal)[:, None]
    h = x + attn(attn_norm(x), cos, sin, mask)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "to the FUTURE of its document", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    T = x.shape[1]
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool))  # the causal triangle
    h = x + attn(attn_norm(x), cos, sin, (same_doc & causal)[:, None])
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "may not attend to itself", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    T = x.shape[1]
    same_doc = doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)
    pos = torch.arange(T)
    earlier = pos[None, :] < pos[:, None]  # key before query
    h = x + attn(attn_norm(x), cos, sin, (same_doc & earlier).unsqueeze(1))
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "documents of the first row", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    T = x.shape[1]
    ids = doc_ids[0]  # the layout of the batch
    same_doc = ids[:, None] == ids[None, :]
    mask = same_doc & torch.ones(T, T, dtype=torch.bool).tril()
    h = x + attn(attn_norm(x), cos, sin, mask)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "the FFN reads the block's input x", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    T = x.shape[1]
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    mask = (same_doc & torch.ones(T, T, dtype=torch.bool).tril())[:, None]
    a = attn(attn_norm(x), cos, sin, mask)
    f = ffn(ffn_norm(x))
    return x + a + f
'''),
    Wrong("packed-answer", "without the RoPE tables", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    T = x.shape[1]
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    mask = (same_doc & torch.ones(T, T, dtype=torch.bool).tril())[:, None]
    h = x + attn(attn_norm(x), mask=mask)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "does not broadcast to the scores' shape", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    T = x.shape[1]
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    mask = same_doc & torch.ones(T, T, dtype=torch.bool).tril()  # (B, T, T)
    h = x + attn(attn_norm(x), cos, sin, mask)
    return h + ffn(ffn_norm(h))
'''),
    Wrong("packed-answer", "TransformerEncoderLayer", '''
def packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    layer = torch.nn.TransformerEncoderLayer(x.shape[-1], 2, 4 * x.shape[-1], dropout=0.0,
                                             batch_first=True, norm_first=True).to(x.dtype)
    return layer(x)
'''),
    # --- Task 2: pre_norm_block_backward (derive) ------------------------------------------------------------
    Wrong("backward-answer", "skip connection around the FFN is missing", _NORM_BACKWARD + '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "skip connection around attention is missing", _NORM_BACKWARD + '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "attention's backward pass receives grad_out", _NORM_BACKWARD + '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    through_ffn = norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    through_attn = norm_backward(attn_norm, x, attn_backward(u1, grad_out))
    return grad_out + through_ffn + through_attn
'''),
    Wrong("backward-answer", "the norms are left out", '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + ffn_backward(ffn_norm(h), grad_out)
    return grad_h + attn_backward(u1, grad_h)
'''),
    Wrong("backward-answer", "treated as a constant scale", '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    def norm_backward(norm, v, g):  # y = v / r * weight
        r = torch.sqrt(v.pow(2).mean(-1, keepdim=True) + norm.eps)
        return norm.weight * g / r

    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "J instead of Jᵀ", '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    def norm_backward(norm, v, g):
        r = torch.sqrt(v.pow(2).mean(-1, keepdim=True) + norm.eps)
        v_hat = v / r
        return norm.weight * (g - v_hat * (v_hat * g).mean(-1, keepdim=True)) / r

    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "a mean, not a sum", '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    def norm_backward(norm, v, g):
        r = torch.sqrt(v.pow(2).mean(-1, keepdim=True) + norm.eps)
        v_hat = v / r
        wg = norm.weight * g
        return (wg - v_hat * (v_hat * wg).sum(-1, keepdim=True)) / r

    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "r must include ε", '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    def norm_backward(norm, v, g):
        r = v.pow(2).mean(-1, keepdim=True).sqrt()
        v_hat = v / r
        wg = norm.weight * g
        return (wg - v_hat * (v_hat * wg).mean(-1, keepdim=True)) / r

    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "the norms are swapped", _NORM_BACKWARD + '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(attn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(ffn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "differentiated at x", _NORM_BACKWARD + '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(ffn_norm, x, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("backward-answer", "evaluated at the raw stream", _NORM_BACKWARD + '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    h = x + attn(attn_norm(x))
    grad_h = grad_out + norm_backward(ffn_norm, h, ffn_backward(h, grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(x, grad_h))
'''),
    Wrong("backward-answer", "Tensor.backward", '''
def pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    x = x.detach().requires_grad_()
    h = x + attn(attn_norm(x))
    (h + ffn(ffn_norm(h))).backward(grad_out)
    return x.grad
'''),
    # --- Task 3: res_post_norm_block_backward (extend) -------------------------------------------------------
    Wrong("res-post-backward-answer", "the PRE-norm block's backward pass", _NORM_BACKWARD + '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + norm_backward(attn_norm, x, attn_backward(u1, grad_h))
'''),
    Wrong("res-post-backward-answer", "Jacobians are taken at the stream", _NORM_BACKWARD + '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    h = x + attn_norm(attn(x))
    grad_h = grad_out + ffn_backward(h, norm_backward(ffn_norm, h, grad_out))
    return grad_h + attn_backward(x, norm_backward(attn_norm, x, grad_h))
'''),
    Wrong("res-post-backward-answer", "the chain is taken in the wrong order", _NORM_BACKWARD + '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    a = attn(x)
    h = x + attn_norm(a)
    f = ffn(h)
    grad_h = grad_out + norm_backward(ffn_norm, f, ffn_backward(h, grad_out))
    return grad_h + norm_backward(attn_norm, a, attn_backward(x, grad_h))
'''),
    Wrong("res-post-backward-answer", "evaluated at a normalized copy", _NORM_BACKWARD + '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    a = attn(x)
    h = x + attn_norm(a)
    f = ffn(h)
    grad_h = grad_out + ffn_backward(ffn_norm(h), norm_backward(ffn_norm, f, grad_out))
    return grad_h + attn_backward(attn_norm(x), norm_backward(attn_norm, a, grad_h))
'''),
    Wrong("res-post-backward-answer", "the norms are left out", '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    h = x + attn_norm(attn(x))
    grad_h = grad_out + ffn_backward(h, grad_out)  # the norms only rescale
    return grad_h + attn_backward(x, grad_h)
'''),
    Wrong("res-post-backward-answer", "attention's path receives grad_out", _NORM_BACKWARD + '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    a = attn(x)
    h = x + attn_norm(a)
    f = ffn(h)
    through_ffn = ffn_backward(h, norm_backward(ffn_norm, f, grad_out))
    through_attn = attn_backward(x, norm_backward(attn_norm, a, grad_out))
    return grad_out + through_ffn + through_attn
'''),
    Wrong("res-post-backward-answer", "skip connection around the FFN is missing", _NORM_BACKWARD + '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    a = attn(x)
    h = x + attn_norm(a)
    grad_h = ffn_backward(h, norm_backward(ffn_norm, ffn(h), grad_out))
    return grad_h + attn_backward(x, norm_backward(attn_norm, a, grad_h))
'''),
    Wrong("res-post-backward-answer", "the norms are swapped", _NORM_BACKWARD + '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    a = attn(x)
    h = x + attn_norm(a)
    f = ffn(h)
    grad_h = grad_out + ffn_backward(h, norm_backward(attn_norm, f, grad_out))
    return grad_h + attn_backward(x, norm_backward(ffn_norm, a, grad_h))
'''),
    Wrong("res-post-backward-answer", "torch.autograd.grad", '''
def res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                 ffn_backward):
    x = x.detach().requires_grad_()
    h = x + attn_norm(attn(x))
    return torch.autograd.grad(h + ffn_norm(ffn(h)), x, grad_out)[0]
'''),
    # --- Task 4: predictions ----------------------------------------------------------------------------
    Wrong("predictions-answer", "RMS values do not add", f'''
def predictions():
    return {{**{_GOOD}, "res_post_rms": 3 + 1 + 1}}
'''),
    Wrong("predictions-answer", "never normalizes the stream", f'''
def predictions():
    return {{**{_GOOD}, "res_post_rms": 1.0}}
'''),
    Wrong("predictions-answer", "the writes are normalized, not silenced", f'''
def predictions():
    return {{**{_GOOD}, "res_post_rms": 3.0}}
'''),
    Wrong("predictions-answer", "that is the mean square", f'''
def predictions():
    return {{**{_GOOD}, "res_post_rms": 9 + 1 + 1}}
'''),
    Wrong("predictions-answer", "it does not divide by 4 again", f'''
def predictions():
    return {{**{_GOOD}, "post_block_gain": 1 / 16}}
'''),
    Wrong("predictions-answer", "every path, the skip connection's included", f'''
def predictions():
    return {{**{_GOOD}, "post_block_gain": 1.0}}
'''),
    Wrong("predictions-answer", "the Jacobian is singular", f'''
def predictions():
    return {{**{_GOOD}, "silenced_post_rank": 64}}
'''),
    Wrong("predictions-answer", "not two different ones", f'''
def predictions():
    return {{**{_GOOD}, "silenced_post_rank": 62}}
'''),
    Wrong("predictions-answer", "causal mask of the whole row", f'''
def predictions():
    return {{**{_GOOD}, "packed_allowed": 8 * 9 // 2}}
'''),
    Wrong("predictions-answer", "the document mask alone", f'''
def predictions():
    return {{**{_GOOD}, "packed_allowed": 3 * 3 + 5 * 5}}
'''),
    Wrong("predictions-answer", "includes the diagonal", f'''
def predictions():
    return {{**{_GOOD}, "packed_allowed": 3 * 2 // 2 + 5 * 4 // 2}}
'''),
    Wrong("predictions-answer", "still empty", f'''
def predictions():
    return {{**{_GOOD}, "packed_allowed": ...}}
'''),
]
