"""Semantic IDs: residual quantisation of item text embeddings (TIGER, Rajput et al. 2023, §3.1).

An item's ID is ``(c1, .., cL, c_collision)``: level ``l`` quantises what the levels before it
left unexplained (the residual), so items that share a prefix are semantically close, and the
last code tells apart items whose ``L`` codes collide (TIGER appends exactly such a token).

- ``rq-kmeans`` (default): k-means on the embeddings, then k-means on the residuals, level by
  level (scikit-learn ``KMeans``, one init, seeded; ``MiniBatchKMeans`` above 50,000 items).
  Codes are always the nearest centroid of the final codebooks (computed here, not taken from
  the clusterer's labels), so ``encode`` of a training embedding reproduces its code exactly.
  It needs no training loop and is deterministic per seed, which is why it is the default on a
  CPU; TIGER's own quantiser is the RQ-VAE below.
- ``rq-vae``: TIGER's RQ-VAE: MLP encoder d -> 512 -> 256 -> 128 -> 32, three residual
  codebooks of 256 x 32 initialised by k-means on the first batch, MLP decoder back to d; loss =
  reconstruction MSE + sum over levels of ||sg[r] - e||^2 + beta ||r - sg[e]||^2 (beta 0.25),
  straight-through gradients, Adagrad at lr 0.4, batch 1024 (the paper's settings; epochs are an
  option because 20k epochs are the paper's and cost minutes on a CPU).
- A level never has more codes than distinct points (tiny pools).
- Collision code: items with the same ``L`` codes are numbered 0, 1, .. in pool order. Its
  vocabulary is ``max(codebook_size, largest group)``. Items quantised later (unseen candidates
  of a variant pool) continue the numbering of their group; past the vocabulary they share its
  last code (their IDs, and so their scores, tie; counted in ``info``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MINIBATCH_ABOVE = 50_000


def nearest(x: np.ndarray, centres: np.ndarray, block: int = 8192) -> np.ndarray:
    """Index of each row's nearest centre (squared Euclidean), in blocks to bound memory."""
    out = np.empty(len(x), dtype=np.int64)
    c2 = (centres.astype(np.float64) ** 2).sum(axis=1)
    for a in range(0, len(x), block):
        xb = x[a : a + block].astype(np.float64)
        d = c2[None, :] - 2.0 * xb @ centres.astype(np.float64).T
        out[a : a + block] = np.argmin(d, axis=1)
    return out


def _kmeans(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Centres of a seeded k-means with at most ``k`` (and at most #distinct points) clusters."""
    n_distinct = len(np.unique(x.round(6), axis=0))
    k = max(1, min(k, n_distinct))
    if k == n_distinct:  # every distinct point is its own centre
        return np.unique(x.round(6), axis=0).astype(np.float32)
    from sklearn.cluster import KMeans, MiniBatchKMeans

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if len(x) > MINIBATCH_ABOVE:
            km = MiniBatchKMeans(n_clusters=k, random_state=seed, batch_size=4096, n_init=1).fit(x)
        else:
            km = KMeans(n_clusters=k, random_state=seed, n_init=1).fit(x)
    return km.cluster_centers_.astype(np.float32)


def collision_codes(prefix: np.ndarray, start: dict[tuple[int, ...], int] | None = None) -> np.ndarray:
    """Number the rows that share a prefix 0, 1, .. in row order (continuing ``start``'s counts)."""
    counts: dict[tuple[int, ...], int] = dict(start or {})
    out = np.empty(len(prefix), dtype=np.int64)
    for i, row in enumerate(map(tuple, prefix.tolist())):
        out[i] = counts.get(row, 0)
        counts[row] = out[i] + 1
    return out


@dataclass
class SemanticIds:
    """A fitted quantiser and the IDs of the items it was fitted on (rows = pool order)."""

    method: str
    codes: np.ndarray  # (N, levels + 1) int64; the last column is the collision code
    codebook_size: int
    collision_size: int  # vocabulary of the collision code
    codebooks: list[np.ndarray] = field(default_factory=list)  # rq-kmeans: per level (k_l, d)
    vae_state: dict[str, Any] | None = None  # rq-vae: state dict (numpy) + dims
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def levels(self) -> int:
        return self.codes.shape[1] - 1

    def quantise(self, x: np.ndarray) -> np.ndarray:
        """The ``levels`` residual codes of embeddings ``x`` (no collision code)."""
        x = np.asarray(x, dtype=np.float32)
        if self.method == "rq-vae":
            return _vae_codes(self.vae_state, x)
        r = x.copy()
        out = np.empty((len(x), len(self.codebooks)), dtype=np.int64)
        for level, cb in enumerate(self.codebooks):
            out[:, level] = nearest(r, cb)
            r = r - cb[out[:, level]]
        return out

    def extend(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """IDs for new items (after every fitted item): their codes and a collision code that
        continues each group's numbering; returns (codes, how many had to share the last code)."""
        prefix = self.quantise(x)
        start: dict[tuple[int, ...], int] = {}
        for row in map(tuple, self.codes[:, :-1].tolist()):
            start[row] = start.get(row, 0) + 1
        coll = collision_codes(prefix, start)
        over = int((coll >= self.collision_size).sum())
        coll = np.minimum(coll, self.collision_size - 1)
        return np.hstack([prefix, coll[:, None]]), over

    # ---------------------------------------------------------------------------- storage

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"codes": self.codes, "sizes": np.array([self.codebook_size, self.collision_size])}
        for i, cb in enumerate(self.codebooks):
            out[f"codebook{i}"] = cb
        for k, v in (self.vae_state or {}).items():
            out[f"vae.{k}"] = np.asarray(v)
        return out

    @classmethod
    def from_arrays(cls, method: str, arrays: dict[str, np.ndarray], info: dict[str, Any]) -> SemanticIds:
        cbs = [arrays[f"codebook{i}"] for i in range(sum(k.startswith("codebook") for k in arrays))]
        vae = {k[4:]: arrays[k] for k in arrays if k.startswith("vae.")} or None
        size, coll = (int(v) for v in arrays["sizes"])
        return cls(method, arrays["codes"].astype(np.int64), size, coll, cbs, vae, info)


def fit_rq_kmeans(x: np.ndarray, levels: int, codebook_size: int, seed: int) -> SemanticIds:
    x = np.asarray(x, dtype=np.float32)
    r = x.copy()
    codebooks, codes = [], np.empty((len(x), levels), dtype=np.int64)
    for level in range(levels):
        cb = _kmeans(r, codebook_size, seed + level)
        codes[:, level] = nearest(r, cb)
        codebooks.append(cb)
        r = r - cb[codes[:, level]]
    return _finish("rq-kmeans", x, codes, codebook_size, codebooks, None,
                   {"residual_rmse": float(np.sqrt((r**2).sum(axis=1).mean()))})


def _finish(method: str, x: np.ndarray, codes: np.ndarray, size: int, codebooks: list[np.ndarray],
            vae: dict[str, Any] | None, info: dict[str, Any]) -> SemanticIds:
    coll = collision_codes(codes)
    groups = len(np.unique(codes, axis=0))
    info = {**info, "items": int(len(x)), "distinct_prefixes": int(groups),
            "largest_collision_group": int(coll.max() + 1) if len(coll) else 0,
            "codes_used_per_level": [int(len(np.unique(codes[:, i]))) for i in range(codes.shape[1])]}
    return SemanticIds(method, np.hstack([codes, coll[:, None]]), size,
                       max(size, int(coll.max() + 1) if len(coll) else 1), codebooks, vae, info)


# --------------------------------------------------------------------------------------------
# RQ-VAE (TIGER's quantiser)
# --------------------------------------------------------------------------------------------

HIDDEN = (512, 256, 128)
LATENT = 32


def _mlp(dims: list[int]) -> Any:
    import torch

    layers: list[Any] = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _vae_codes(state: dict[str, Any], x: np.ndarray) -> np.ndarray:
    import torch

    d = int(np.asarray(state["dims"])[0])
    enc = _mlp([d, *HIDDEN, LATENT])
    enc.load_state_dict({k[4:]: torch.from_numpy(np.asarray(v)) for k, v in state.items() if k.startswith("enc.")})
    with torch.no_grad():
        z = enc(torch.from_numpy(x)).numpy()
    levels = sum(1 for k in state if k.startswith("codebook"))
    out = np.empty((len(x), levels), dtype=np.int64)
    for level in range(levels):
        cb = np.asarray(state[f"codebook{level}"])
        out[:, level] = nearest(z, cb)
        z = z - cb[out[:, level]]
    return out


def fit_rq_vae(x: np.ndarray, levels: int, codebook_size: int, seed: int, epochs: int,
               batch_size: int = 1024, lr: float = 0.4, beta: float = 0.25) -> SemanticIds:
    import torch

    x = np.asarray(x, dtype=np.float32)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    d = x.shape[1]
    enc, dec = _mlp([d, *HIDDEN, LATENT]), _mlp([LATENT, *HIDDEN[::-1], d])
    xt = torch.from_numpy(x)
    k = min(codebook_size, len(x))
    with torch.no_grad():  # codebooks: k-means on the first batch's residuals (the paper's init)
        first = xt[torch.from_numpy(rng.permutation(len(x))[:batch_size])]
        r = enc(first).numpy()
        books = []
        for level in range(levels):
            cb = _kmeans(r, k, seed + level)
            if len(cb) < k:  # fewer distinct points than codes: pad with jittered copies
                extra = cb[rng.integers(0, len(cb), k - len(cb))] + 1e-3 * rng.standard_normal((k - len(cb), LATENT))
                cb = np.vstack([cb, extra.astype(np.float32)])
            books.append(torch.nn.Parameter(torch.from_numpy(cb)))
            r = r - cb[nearest(r, cb)]
    params = [*enc.parameters(), *dec.parameters(), *books]
    opt = torch.optim.Adagrad(params, lr=lr)
    losses = []
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(x)))
        for a in range(0, len(x), batch_size):
            xb = xt[order[a : a + batch_size]]
            z = enc(xb)
            r, q, commit = z, torch.zeros_like(z), 0.0
            for cb in books:
                idx = torch.cdist(r.detach(), cb.detach()).argmin(dim=1)
                e = cb[idx]
                commit = commit + ((r.detach() - e) ** 2).sum(1).mean() + beta * ((r - e.detach()) ** 2).sum(1).mean()
                q = q + e
                r = r - e.detach()
            zq = z + (q - z).detach()  # straight-through
            loss = ((dec(zq) - xb) ** 2).sum(1).mean() + commit
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses.append(loss.item())
    state = {f"enc.{k_}": v.detach().numpy().copy() for k_, v in enc.state_dict().items()}
    state.update({f"codebook{i}": cb.detach().numpy().copy() for i, cb in enumerate(books)})
    state["dims"] = np.array([d, LATENT])
    codes = _vae_codes(state, x)
    return _finish("rq-vae", x, codes, codebook_size, [], state,
                   {"epochs": epochs, "final_loss": losses[-1] if losses else None})


def fit(x: np.ndarray, method: str, levels: int, codebook_size: int, seed: int, vae_epochs: int) -> SemanticIds:
    if method == "rq-vae":
        return fit_rq_vae(x, levels, codebook_size, seed, vae_epochs)
    return fit_rq_kmeans(x, levels, codebook_size, seed)
