"""numpy reference for GPTQ: the independent oracle that a C GPTQ in lowbit
is to be checked against. Written from the paper without reading lowbit's
C sources:

  Frantar, Ashkboos, Hoefler, Alistarh, "GPTQ: Accurate Post-Training
  Quantization for Generative Pre-trained Transformers", ICLR 2023,
  Algorithm 1 (the Cholesky form with lazy batch updates).

Where the paper leaves a detail open, the rule is taken from the authors'
public code, IST-DASLab/gptq at 2d65066 (gptq.py, GPTQ.add_batch and
GPTQ.fasterquant; quant.py, quantize and Quantizer.find_params), read for
its rules only. Taken from there: the 1/n in H; the dead-column rule; the
dampening as a fraction of mean(diag H) (the paper states the 1%); the
upper Cholesky factor of H^-1 computed via cholesky / cholesky_inverse;
block 128; act-order as a sort of the columns by decreasing diag(H) with
the inverse permutation applied to Q; static_groups (parameters of every
group from W before act-order and before any update); non-static group
parameters chosen when the group's first column is reached; the
asymmetric grid's range including 0 and its rounded zero point; round
half to even. Ours, where the reference has none or differs: the damping
retry, the tie order of act-order, the all-zero-group rule, the choice
of the current weights for non-static groups (see 7.), and the choice of
parameters for whole-row groups after the dead-column rule (the
reference chooses them before zeroing dead columns).
All arithmetic is float64.

Variant implemented (`gptq`):
  W is (out_features, in_features), one row per output; H is
  (in_features, in_features).
  hessian(X) = 2 X^T X / n for X of shape (n, in_features)
      (the paper's H = 2 X X^T; the 1/n normalisation is add_batch's).
  1. H is symmetrised as (H + H^T) / 2 (a no-op for a symmetric H).
  2. dead columns: where H[i,i] == 0, H[i,i] = 1 and W[:,i] = 0
      (fasterquant). Every quantizer parameter below is chosen from this
      W (dead columns already zero).
  3. act-order (actorder=True): the columns are processed in the order
      perm = stable argsort of -diag(H) (decreasing diag(H), ties by
      increasing column index -- the reference's torch.argsort does not
      promise a tie order); W's columns and H's rows and columns are
      permuted, and Q is returned in the original column order.
  4. dampening: lambda = damp * mean(diag(H)) is added to the diagonal
      (paper section 4, "Step 3"; fasterquant's percdamp, default 0.01).
      The mean is taken after the dead-column rule; if it is not > 0, the
      base is max|H| (or 1 if H is all zero) instead.
      If a Cholesky factorisation below fails (H + lambda I not positive
      definite to working precision) or gives a non-finite factor, the
      relative dampening is raised and everything retried:
      damp <- 10 * damp (0.01 when damp was 0), at most 12 times, then
      ValueError. The reference code has no retry; this rule is ours.
      info["damp_retries"] counts the retries, info["damp_rel"] and
      info["damp"] give the relative and absolute lambda finally used.
  5. Hinv = U, the upper Cholesky factor of (H + lambda I)^-1
      (H^-1 = U^T U), computed as L = chol(H + lambda I),
      H^-1 = L^-T L^-1, U = chol(H^-1)^T (fasterquant's
      cholesky / cholesky_inverse / cholesky(upper=True)).
  6. Columns in blocks of `block` (default 128, the paper's B): inside a
      block, for each column j in turn
          q_j   = quantize(w_j)                (dequantized values)
          e_j   = (w_j - q_j) / U[j,j]
          w_k  -= e_j U[j,k]        for the block's columns k >= j
      and after the block the block's errors are applied to every later
      column at once: W[:, end:] -= E_block U[block, end:]
      (Algorithm 1's lazy batch update). The result equals the plain
      column-by-column OBS form of the paper's eqs. (2)-(3), which
      `gptq_unblocked` implements with explicit inverse updates.
  7. groups: every quantizer has a group size g (None = the whole row);
      groups are g consecutive ORIGINAL input columns (the last one
      partial when in_features is not a multiple of g).
      static_groups=True: every group's parameters are chosen from W
          (after step 2, before any column is rounded) -- fasterquant's
          static_groups; this is what makes act-order and groups combine.
      static_groups=False: a group's parameters are chosen when its first
          column is reached, from the current weights of the group's
          columns, i.e. with the error of every earlier column already
          applied. This is defined without act-order only (ValueError for
          actorder with a group smaller than the row: the reference code
          would then form groups of consecutive *permuted* columns).
          With act-order and whole-row groups the parameters come from W.
      Note on the reference code: fasterquant picks a non-static group's
      parameters from its full matrix W, which does not yet hold the
      current block's in-block updates. When every group starts at a
      block start (g a multiple of block, e.g. g = block = 128) the two
      are the same; otherwise (e.g. g = 32, block = 128) they differ and
      the reference's choice depends on the block size.
      group_params_from="block_start" reproduces that reference
      behaviour; the default "current" is block-size independent (and is
      what gptq_unblocked computes).
  The returned Q is the dequantized ("fake-quantized") weight matrix,
  float64, same shape as W. info also holds "perm" (processing order),
  "dead" (dead column indices) and "loss", the reference's
  sum((w - q)^2 / U[j,j]^2) / 2.

Quantizers. Common interface:
  .group             columns per parameter group (None = whole row)
  .bind(W)           the quantizer with any per-tensor parameter fixed from
                     the whole W (only NVFP4 has one); others return self
  .params(Wg)        parameters of one group: a tuple of arrays of shape
                     (out_features,), one value per output row, from the
                     group's columns Wg (out_features, <= g)
  .quantize(col, p)  dequantized values of one column (out_features,)
  rne = round half to even (np.rint, like torch.round); amax = max |w|
  over the row's group. A parameter of 0 (all-zero group) gives q = 0.

  IntSym(bits, group)   symmetric integer, codes -2^(b-1) .. 2^(b-1)-1:
      d = amax / (2^(b-1) - 1)
      q = clip(rne(w / d), -2^(b-1), 2^(b-1) - 1) * d
      (the original weights use codes -(2^(b-1)-1) .. 2^(b-1)-1; the
      extra negative code only catches error-updated weights. The
      reference's sym=True is a different grid, zero point 2^(b-1), scale
      2 amax / (2^b - 1); not implemented.)
  IntAsym(bits, group)  asymmetric integer, codes 0 .. 2^b - 1
      (quant.py find_params, sym=False: the range always includes 0):
      lo = min(0, min w), hi = max(0, max w)
      d = (hi - lo) / (2^b - 1),  z = rne(-lo / d)
      q = (clip(rne(w / d) + z, 0, 2^b - 1) - z) * d
      (the reference maps an all-zero group to lo,hi = -1,1; here d = 0,
      q = 0.)
  FP8(group=None)       FP8 E4M3 (OCP "e4m3fn", max 448), per output row:
      s = amax / 448
      q = fp8(clip(w / s, -448, 448)) * s, fp8() = round to nearest even
          E4M3 value (ml_dtypes.float8_e4m3fn cast); the clip keeps
          error-updated weights from overflowing to NaN.
  NVFP4(group=16)       E2M1 elements {0, .5, 1, 1.5, 2, 3, 4, 6} (and
                        negatives), blocks of 16 consecutive columns:
      bind:   G = float32(max|W| / (6 * 448)), per tensor, from all of W
      params: s = fp8(clip((amax / 6) / G, 0, 448))   E4M3 block scale
      q = e2m1(clip(w / (s * G), -6, 6)) * (s * G)
          e2m1() = round to nearest even E2M1 (ml_dtypes.float4_e2m1fn)
  MXFP4(group=32)       E2M1 elements, blocks of 32, E8M0 shared scale
                        (OCP Microscaling spec v1.0, section 6.3):
      params: X = 2^(floor(log2(amax)) - 2), the exponent clamped to
          [-127, 127]; floor(log2(amax)) taken exactly (frexp)
      q = e2m1(clip(w / X, -6, 6)) * X
      (amax / X lies in [4, 8): the largest elements saturate to 6.)

`rtn(W, quantizer)`: round-to-nearest with the same quantizer, every
group's parameters from W, every column quantized with them.
"""
import ml_dtypes
import numpy as np

F64 = np.float64
_FP8 = ml_dtypes.float8_e4m3fn
_FP4 = ml_dtypes.float4_e2m1fn
FP8_MAX = 448.0
E2M1_MAX = 6.0


def _fp8(x):
    return np.asarray(x, F64).astype(_FP8).astype(F64)


def _e2m1(x):
    return np.asarray(x, F64).astype(_FP4).astype(F64)


def _safe(d):
    """d where it is > 0, else 1 (the caller zeroes those rows)."""
    return np.where(d > 0, d, 1.0)


# ---------------------------------------------------------------- quantizers

class IntSym:
    def __init__(self, bits=4, group=None):
        self.bits, self.group = bits, group
        self.kmax = 2 ** (bits - 1) - 1
        self.kmin = -(2 ** (bits - 1))

    def __repr__(self):
        return f"IntSym(bits={self.bits}, group={self.group})"

    def bind(self, W):
        return self

    def params(self, Wg):
        amax = np.max(np.abs(Wg), axis=1)
        return (amax / self.kmax,)

    def quantize(self, col, p):
        (d,) = p
        k = np.clip(np.rint(col / _safe(d)), self.kmin, self.kmax)
        return np.where(d > 0, k * d, 0.0)


class IntAsym:
    def __init__(self, bits=4, group=None):
        self.bits, self.group = bits, group
        self.maxq = 2 ** bits - 1

    def __repr__(self):
        return f"IntAsym(bits={self.bits}, group={self.group})"

    def bind(self, W):
        return self

    def params(self, Wg):
        lo = np.minimum(np.min(Wg, axis=1), 0.0)
        hi = np.maximum(np.max(Wg, axis=1), 0.0)
        d = (hi - lo) / self.maxq
        z = np.where(d > 0, np.rint(-lo / _safe(d)), 0.0)
        return (d, z)

    def quantize(self, col, p):
        d, z = p
        k = np.clip(np.rint(col / _safe(d)) + z, 0, self.maxq)
        return np.where(d > 0, (k - z) * d, 0.0)


class FP8:
    def __init__(self, group=None):
        self.group = group

    def __repr__(self):
        return f"FP8(group={self.group})"

    def bind(self, W):
        return self

    def params(self, Wg):
        return (np.max(np.abs(Wg), axis=1) / FP8_MAX,)

    def quantize(self, col, p):
        (s,) = p
        v = _fp8(np.clip(col / _safe(s), -FP8_MAX, FP8_MAX))
        return np.where(s > 0, v * s, 0.0)


class NVFP4:
    def __init__(self, group=16, global_scale=None):
        self.group = group
        self.global_scale = global_scale

    def __repr__(self):
        return f"NVFP4(group={self.group})"

    def bind(self, W):
        amax = float(np.max(np.abs(W))) if np.size(W) else 0.0
        G = float(np.float32(amax / (E2M1_MAX * FP8_MAX)))
        return NVFP4(self.group, G)

    def params(self, Wg):
        G = self.global_scale
        if G is None:
            raise ValueError("NVFP4: bind(W) first (per-tensor scale)")
        amax = np.max(np.abs(Wg), axis=1)
        if G == 0:
            return (np.zeros_like(amax),)
        s = _fp8(np.clip((amax / E2M1_MAX) / G, 0.0, FP8_MAX))
        return (s * G,)   # exact: 4-bit times 24-bit significand

    def quantize(self, col, p):
        (sg,) = p
        v = _e2m1(np.clip(col / _safe(sg), -E2M1_MAX, E2M1_MAX))
        return np.where(sg > 0, v * sg, 0.0)


class MXFP4:
    def __init__(self, group=32):
        self.group = group

    def __repr__(self):
        return f"MXFP4(group={self.group})"

    def bind(self, W):
        return self

    def params(self, Wg):
        amax = np.max(np.abs(Wg), axis=1)
        _, e = np.frexp(amax)              # amax = m 2^e, m in [0.5, 1)
        ex = np.clip(e.astype(np.int64) - 1 - 2, -127, 127)
        X = np.ldexp(1.0, ex)
        return (np.where(amax > 0, X, 0.0),)

    def quantize(self, col, p):
        (X,) = p
        v = _e2m1(np.clip(col / _safe(X), -E2M1_MAX, E2M1_MAX))
        return np.where(X > 0, v * X, 0.0)


# ---------------------------------------------------------------- helpers

def hessian(X):
    """H = 2 X^T X / n, float64, X of shape (n_samples, in_features)."""
    X = np.asarray(X, F64)
    return 2.0 * (X.T @ X) / X.shape[0]


def _group_size(quantizer, cols):
    g = quantizer.group
    if g is None or g <= 0 or g >= cols:
        return cols
    return int(g)


def _group_bounds(cols, g):
    return [(a, min(a + g, cols)) for a in range(0, cols, g)]


def rtn(W, quantizer):
    """Round to nearest: every group's parameters from W, every column
    quantized with its group's parameters. float64, shape of W."""
    W = np.array(W, dtype=F64)
    cols = W.shape[1]
    qz = quantizer.bind(W)
    g = _group_size(qz, cols)
    Q = np.empty_like(W)
    for a, b in _group_bounds(cols, g):
        p = qz.params(W[:, a:b])
        for j in range(a, b):
            Q[:, j] = qz.quantize(W[:, j], p)
    return Q


def _prepare(W, H):
    """float64 copies; symmetrise H; the dead-column rule (step 2)."""
    W = np.array(W, dtype=F64)
    H = np.array(H, dtype=F64)
    if W.ndim != 2 or H.shape != (W.shape[1], W.shape[1]):
        raise ValueError(f"shapes: W {W.shape}, H {H.shape}")
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(H))):
        raise ValueError("W and H must be finite")
    H = (H + H.T) / 2.0
    dead = np.flatnonzero(np.diag(H) == 0)
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    return W, H, dead


MAX_DAMP_RETRIES = 12


def _damped_inverse_cholesky(H, damp):
    """Step 4-5: (U, lambda, relative damp, retries), U upper with
    (H + lambda I)^-1 = U^T U."""
    n = H.shape[0]
    mean = float(np.mean(np.diag(H)))
    if mean > 0:
        base = mean
    else:
        base = float(np.max(np.abs(H))) or 1.0
    p = float(damp)
    idx = np.arange(n)
    for retries in range(MAX_DAMP_RETRIES + 1):
        lam = p * base
        Hd = H.copy()
        Hd[idx, idx] += lam
        try:
            L = np.linalg.cholesky(Hd)
            Linv = np.linalg.inv(L)
            Hinv = Linv.T @ Linv
            Hinv = (Hinv + Hinv.T) / 2.0
            U = np.linalg.cholesky(Hinv).T
            if np.all(np.isfinite(U)) and np.all(np.diag(U) > 0):
                return U, lam, p, retries
        except np.linalg.LinAlgError:
            pass
        p = 10.0 * p if p > 0 else 0.01
    raise ValueError(f"H + lambda I not positive definite after "
                     f"{MAX_DAMP_RETRIES} dampening increases")


def _order(H, actorder):
    n = H.shape[0]
    if not actorder:
        return np.arange(n)
    return np.argsort(-np.diag(H), kind="stable")


# ---------------------------------------------------------------- GPTQ

def gptq(W, H, quantizer, block=128, damp=0.01, actorder=False,
         static_groups=False, group_params_from="current"):
    """GPTQ (Algorithm 1, lazy batch updates). Returns (Q, info); Q is the
    dequantized weight matrix (float64, shape of W, original column
    order). See the module docstring for every rule."""
    if group_params_from not in ("current", "block_start"):
        raise ValueError("group_params_from: 'current' or 'block_start'")
    if block < 1:
        raise ValueError("block must be >= 1")
    W, H, dead = _prepare(W, H)
    rows, cols = W.shape
    qz = quantizer.bind(W)
    g = _group_size(qz, cols)
    bounds = _group_bounds(cols, g)
    if actorder and not static_groups and g < cols:
        raise ValueError("act-order with groups needs static_groups=True")
    static = static_groups or actorder

    params = [None] * len(bounds)
    if static:
        for k, (a, b) in enumerate(bounds):
            params[k] = qz.params(W[:, a:b])

    perm = _order(H, actorder)
    W = W[:, perm]
    H = H[np.ix_(perm, perm)]
    gid = perm // g                       # group of each processed column
    U, lam, p, retries = _damped_inverse_cholesky(H, damp)

    Q = np.zeros_like(W)
    loss = 0.0
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        W1 = W[:, i1:i2].copy()           # block, updated in place
        E1 = np.zeros((rows, i2 - i1))
        U1 = U[i1:i2, i1:i2]
        for i in range(i2 - i1):
            j = i1 + i
            if not static and j % g == 0:
                e = min(j + g, cols)
                if group_params_from == "block_start":
                    cur = W[:, j:e]       # lacks this block's updates
                else:
                    cur = W1[:, i:min(e, i2) - i1]
                    if e > i2:            # pending errors of this block
                        tail = W[:, i2:e] - E1 @ U[i1:i2, i2:e]
                        cur = np.concatenate([cur, tail], axis=1)
                params[j // g] = qz.params(cur)
            w = W1[:, i]
            q = qz.quantize(w, params[gid[j]])
            Q[:, j] = q
            err = (w - q) / U1[i, i]
            loss += float(np.sum(err * err)) / 2.0
            W1[:, i:] -= np.outer(err, U1[i, i:])
            E1[:, i] = err
        W[:, i2:] -= E1 @ U[i1:i2, i2:]

    Q = Q[:, np.argsort(perm)]
    info = dict(perm=perm, dead=dead, damp=lam, damp_rel=p,
                damp_retries=retries, loss=loss)
    return Q, info


def gptq_unblocked(W, H, quantizer, damp=0.01, actorder=False,
                   static_groups=False):
    """The slow, plain form: the paper's OBS step (eqs. 2-3) one column at
    a time, with an explicit inverse Hessian from which each quantized
    column is eliminated, no Cholesky reformulation and no lazy batching:
        e = (w_j - q_j) / Hinv[j,j]
        W[:, k] -= e Hinv[j,k]                   for all k >= j
        Hinv <- Hinv - Hinv[:,j] Hinv[j,:] / Hinv[j,j]
    Same preprocessing, dampening, order and group rules as gptq (the
    dampening retry decision is shared so both see the same lambda)."""
    W, H, dead = _prepare(W, H)
    rows, cols = W.shape
    qz = quantizer.bind(W)
    g = _group_size(qz, cols)
    if actorder and not static_groups and g < cols:
        raise ValueError("act-order with groups needs static_groups=True")
    static = static_groups or actorder
    perm = _order(H, actorder)
    H = H[np.ix_(perm, perm)]
    _, lam, p, retries = _damped_inverse_cholesky(H, damp)
    Hinv = np.linalg.inv(H + lam * np.eye(cols))

    group_p = {}
    if static:
        for a, b in _group_bounds(cols, g):
            group_p[a // g] = qz.params(W[:, a:b])
    Wp = W[:, perm]
    Q = np.zeros_like(Wp)
    for j in range(cols):
        orig = perm[j]
        if not static and orig % g == 0:
            group_p[orig // g] = qz.params(Wp[:, j:min(j + g, cols)])
        w = Wp[:, j].copy()
        q = qz.quantize(w, group_p[orig // g])
        Q[:, j] = q
        d = Hinv[j, j]
        err = (w - q) / d
        Wp[:, j:] -= np.outer(err, Hinv[j, j:])
        Hinv[j:, j:] -= np.outer(Hinv[j:, j], Hinv[j, j:]) / d
    Q = Q[:, np.argsort(perm)]
    return Q, dict(perm=perm, dead=dead, damp=lam, damp_rel=p,
                   damp_retries=retries)
