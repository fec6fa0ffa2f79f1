"""Realistic wrong answers for exercise 02 (embeddings and positions)."""

from . import Wrong

ASSIGNMENT = "02_embeddings_and_positions"

WRONG = [
    # --- Task 1: sinusoidal_encoding ------------------------------------------------------------------
    Wrong("sinusoidal-answer", "sin and cos are swapped", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    angles = positions[:, None] * omega
    return torch.stack((torch.cos(angles), torch.sin(angles)), dim=-1).reshape(len(positions), d_model)
'''),
    Wrong("sinusoidal-answer", "all the sines first", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    angles = positions[:, None] * omega
    return torch.cat((torch.sin(angles), torch.cos(angles)), dim=-1)
'''),
    Wrong("sinusoidal-answer", "You used i instead of 2i", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    i = torch.arange(d_model // 2)
    omega = 1.0 / base ** (i / d_model)
    angles = positions[:, None] * omega
    return torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(1)
'''),
    Wrong("sinusoidal-answer", "its own base^(−j/d_model)", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    pe = torch.zeros(len(positions), d_model)
    for j in range(d_model):
        angle = positions * base ** (-j / d_model)
        pe[:, j] = torch.sin(angle) if j % 2 == 0 else torch.cos(angle)
    return pe
'''),
    Wrong("sinusoidal-answer", "the frequency is inverted", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    omega = base ** (torch.arange(0, d_model, 2) / d_model)
    angles = positions[:, None] * omega
    return torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(1)
'''),
    Wrong("sinusoidal-answer", "the `base` argument is ignored", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    omega = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)
    angles = positions[:, None] * omega
    return torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(1)
'''),
    Wrong("sinusoidal-answer", "you ignored the `positions` tensor", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    pos = torch.arange(len(positions))[:, None]
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    return torch.stack((torch.sin(pos * omega), torch.cos(pos * omega)), dim=-1).flatten(1)
'''),
    Wrong("sinusoidal-answer", "it should be float32", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = positions.double()[:, None] * omega
    return torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(1)
'''),
    Wrong("sinusoidal-answer", "course_lib.positional", '''
def sinusoidal_encoding(positions, d_model, base=10000.0):
    return positional.sinusoidal_encoding(positions, d_model, base)
'''),
    # --- Task 2: sinusoidal_shift_matrix -------------------------------------------------------------
    Wrong("shift-answer", "transpose of M_k", '''
def sinusoidal_shift_matrix(k, d_model, base=10000.0):
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        phi = k * base ** (-2 * i / d_model)
        c, s = math.cos(phi), math.sin(phi)
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    return m
'''),
    Wrong("shift-answer", "must be k·ω_i", '''
def sinusoidal_shift_matrix(k, d_model, base=10000.0):
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = base ** (-2 * i / d_model)
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(w), -math.sin(w)],
                                                            [math.sin(w), math.cos(w)]])
    return m
'''),
    Wrong("shift-answer", "You used i instead of 2i", '''
def sinusoidal_shift_matrix(k, d_model, base=10000.0):
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        phi = k * base ** (-i / d_model)
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(phi), -math.sin(phi)],
                                                            [math.sin(phi), math.cos(phi)]])
    return m
'''),
    Wrong("shift-answer", "the blocks sit on the wrong coordinates", '''
def sinusoidal_shift_matrix(k, d_model, base=10000.0):
    half = d_model // 2
    phi = k * base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    c, s = torch.diag(torch.cos(phi)), torch.diag(torch.sin(phi))
    return torch.cat((torch.cat((c, -s), 1), torch.cat((s, c), 1)), 0)
'''),
    Wrong("shift-answer", "the sin terms are missing", '''
def sinusoidal_shift_matrix(k, d_model, base=10000.0):
    phi = k * base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.diag(torch.cos(phi).repeat_interleave(2))
'''),
    Wrong("shift-answer", "the `base` argument is ignored", '''
def sinusoidal_shift_matrix(k, d_model, base=10000.0):
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        phi = k / 10000 ** (2 * i / d_model)
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(phi), -math.sin(phi)],
                                                            [math.sin(phi), math.cos(phi)]])
    return m
'''),
    Wrong("shift-answer", "should be float64", '''
def sinusoidal_shift_matrix(k, d_model, base=10000.0):
    m = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        phi = k * base ** (-2 * i / d_model)
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(phi), -math.sin(phi)],
                                                            [math.sin(phi), math.cos(phi)]])
    return m
'''),
    # --- Task 3: apply_rope -----------------------------------------------------------------------
    Wrong("rope-answer", "still what the given version computes", '''
def apply_rope(x, cos, sin, pairing="half"):
    half = x.shape[-1] // 2
    if pairing == "half":
        a, b = x[..., :half], x[..., half:]
    else:
        a, b = x[..., ::2], x[..., 1::2]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
'''),
    Wrong("rope-answer", "the 'half' pairing", '''
def apply_rope(x, cos, sin, pairing="half"):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
'''),
    Wrong("rope-answer", "the 'interleaved' pairing", '''
def apply_rope(x, cos, sin, pairing="half"):
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
'''),
    Wrong("rope-answer", "the wrong way", '''
def apply_rope(x, cos, sin, pairing="half"):
    half = x.shape[-1] // 2
    if pairing == "half":
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * cos + b * sin, b * cos - a * sin), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos + b * sin, b * cos - a * sin), dim=-1).flatten(-2)
'''),
    Wrong("rope-answer", "different pairings", '''
def apply_rope(x, cos, sin, pairing="half"):
    half = x.shape[-1] // 2
    if pairing == "half":
        c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        return x * c + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * s
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
'''),
    Wrong("rope-answer", "cos and sin are swapped", '''
def apply_rope(x, cos, sin, pairing="half"):
    half = x.shape[-1] // 2
    if pairing == "half":
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * sin - b * cos, a * cos + b * sin), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * sin - b * cos, a * cos + b * sin), dim=-1).flatten(-2)
'''),
    Wrong("rope-answer", "changed its input `x` in place", '''
def apply_rope(x, cos, sin, pairing="half"):
    half = x.shape[-1] // 2
    if pairing == "half":
        a, b = x[..., :half].clone(), x[..., half:].clone()
        x[..., :half], x[..., half:] = a * cos - b * sin, a * sin + b * cos
        return x
    a, b = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2], x[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return x
'''),
    Wrong("rope-answer", "course_lib.positional", '''
def apply_rope(x, cos, sin, pairing="half"):
    return positional.apply_rope(x, cos, sin, pairing)
'''),
    # --- Task 4: predictions -------------------------------------------------------------------------
    Wrong("predictions-answer", "holds only when H is a power of two", '''
def predictions():
    return {"alibi_12": [2 ** (-8 * (h + 1) / 12) for h in range(12)], "pe_self_dot": 64,
            "rope_repeated_gap": 0.0, "rope_period": 2 * math.pi}
'''),
    Wrong("predictions-answer", "starting with its FIRST", '''
def predictions():
    slopes = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 1) for h in range(4)]
    return {"alibi_12": slopes, "pe_self_dot": 64, "rope_repeated_gap": 0.0, "rope_period": 2 * math.pi}
'''),
    Wrong("predictions-answer", "the slopes are not sorted", '''
def predictions():
    slopes = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]
    return {"alibi_12": sorted(slopes, reverse=True), "pe_self_dot": 64, "rope_repeated_gap": 0.0,
            "rope_period": 2 * math.pi}
'''),
    Wrong("predictions-answer", "D/2 pairs", '''
def predictions():
    slopes = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]
    return {"alibi_12": slopes, "pe_self_dot": 128, "rope_repeated_gap": 0.0, "rope_period": 2 * math.pi}
'''),
    Wrong("predictions-answer", "what do the value vectors", '''
def predictions():
    slopes = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]
    return {"alibi_12": slopes, "pe_self_dot": 64, "rope_repeated_gap": 1.0, "rope_period": 2 * math.pi}
'''),
    Wrong("predictions-answer", "a full circle", '''
def predictions():
    slopes = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]
    return {"alibi_12": slopes, "pe_self_dot": 64, "rope_repeated_gap": 0.0, "rope_period": 1.0}
'''),
    Wrong("predictions-answer", "whatever Θ is", '''
def predictions():
    slopes = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]
    return {"alibi_12": slopes, "pe_self_dot": 64, "rope_repeated_gap": 0.0, "rope_period": 10000}
'''),
    Wrong("predictions-answer", "a list of 12 numbers", '''
def predictions():
    return {"alibi_12": [2 ** -(h + 1) for h in range(8)], "pe_self_dot": 64, "rope_repeated_gap": 0.0,
            "rope_period": 2 * math.pi}
'''),
]
