"""(Transitional: assignments move to tests/mistakes/exNN.py as their checkers move to the Task core.)

Known wrong answers for every graded task, used by tests/test_exercises.py.

For each assignment, each answer cell's ``grade_id`` maps to replacement code with one typical
mistake. Autograding a copy of the source notebook with that one cell replaced must cost exactly the
points of the matching test cell. A new assignment must add its entries here (a test checks).
"""

MISTAKES: dict[str, dict[str, str]] = {
    "11_memory_in_training": {
        # every save counted, each with the size of the saved view: no de-duplication, no whole storage
        "saved-bytes-answer": '''\
def saved_bytes(fn, args, exclude=()):
    skip = {id(p) for p in exclude}
    total = 0

    def pack(t):
        nonlocal total
        if id(t) not in skip:
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return total
''',
        # K and V counted with n_kv_heads heads on both paths (the explicit path saves repeat_kv's copies)
        "block-bytes-answer": '''\
def block_saved_bytes(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention):
    B, T, D, H, H_kv, F_ = batch, seq_len, d_model, n_heads, n_kv_heads, d_ff
    D_h = D // H
    common = 2 * (3 * B * T * D + B * T) + T * D_h + B * T * H * D_h + 4 * B * T * F_
    qkv = B * H * T * D_h + 2 * B * H_kv * T * D_h
    if attention == "sdpa":
        return 4 * (common + qkv + B * H * T * D_h + B * H * T)
    return 4 * (common + qkv + 2 * B * H * T * T) + 2 * T * T
''',
    },
}
