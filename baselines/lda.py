"""Baseline "LDA": each sequence a bag of symbols, topics = states, fitted with gensim.

A plug-in around :class:`gensim.models.LdaModel` (single process, never ``LdaMulticore``):
each sequence becomes a gensim bag of words ``[(symbol, count), ...]`` over the vocabulary
``0..V-1``, ``num_topics = n_states``, the document-topic prior ``alpha`` is learned
(``"auto"``) and everything runs in float64 with ``random_state = seed``. Order inside a
sequence is ignored: that is the point of this baseline.

The held-out score (``score_kind = "lower_bound"``)
--------------------------------------------------
Gensim's ``LdaModel.bound(corpus)`` is the corpus ELBO of online LDA (Hoffman et al.
2010), with variational posteriors q(theta_d) = Dir(gamma_d) per document and
q(beta_k) = Dir(lambda_k) per topic. It is the sum of

1. per document d, with ``Elogtheta_d = E_q[log theta_d]``, ``Elogbeta = E_q[log beta]``:

   * ``sum_w n_dw * logsumexp_k(Elogtheta_dk + Elogbeta_kw)``: E_q[log p(w_d, z_d | theta_d,
     beta)] + H[q(z_d)] with the optimal q(z_d) (phi) substituted in closed form;
   * ``E_q[log p(theta_d | alpha)] - E_q[log q(theta_d | gamma_d)]
     = -KL(Dir(gamma_d) || Dir(alpha))``
     ``= sum_k (alpha_k - gamma_dk) Elogtheta_dk + sum_k (lgamma(gamma_dk) - lgamma(alpha_k))
     + lgamma(sum alpha) - lgamma(sum gamma_d)``;

   the sum over documents multiplied by ``subsample_ratio``;

2. once for the whole corpus: ``E_q[log p(beta | eta)] - E_q[log q(beta | lambda)]
   = -sum_k KL(Dir(lambda_k) || Dir(eta))``, the topic term.

``score_samples`` returns exactly the per-document part 1 for each sequence (with
``subsample_ratio = 1``) and **excludes** the topic term 2: it does not belong to any one
document (it is the same number whatever the held-out documents are, and gensim itself
does not scale it with the corpus), and counting it once per document would be wrong while
spreading it over documents would be arbitrary. So for any corpus
``score_samples(X).sum() == model_.bound(bows(X), gamma) - topic_term``, which the tests
check. Each per-document value is a lower bound on
``log E_{q(beta)} p(w_d | beta, alpha)``, the document's log marginal likelihood with the
topic posterior replaced by q(beta), which is what gensim's held-out perplexity reports
(Jensen twice: over beta, then the usual ELBO over theta and z).

gamma_d comes from gensim's per-document inference (fixed-point iterations from a random
start; ``max_iter`` and ``gamma_threshold`` control them). By default it runs as
:class:`FastLdaModel`, a subclass of ``LdaModel`` whose ``inference`` is the same algorithm
with the same random draws, advanced for all documents at once in numpy (gensim loops over
documents in Python: on 31k sequences of 20-100 symbols with K=8, about 35 s per pass
against about 4 s); the tests check it against gensim's own ``inference``. The training
loop (online updates, alpha's Newton steps, ``passes``) is gensim's, untouched. The bound
is then evaluated for all documents at once in numpy rather than through ``bound([doc])``
per document (which would redo the inference). Before every scoring call the model's
random state is reset from ``seed``, so scoring the same sequences twice gives identical
numbers; a document's random gamma start does depend on its position in the batch, which
can move its bound slightly (on the order of the inference tolerance).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from gensim.models import LdaModel
from scipy.special import gammaln, logsumexp, psi

from ..data.seeds import derived_seeds
from ..models.base import SequenceModel
from ..models.fit_starts import best_of
from ..models.registry import register
from .library_logs import quiet_logger

__all__ = ["LDA", "FastLdaModel", "to_bow_matrix", "to_bow_corpus", "topic_kl_term"]


def to_bow_matrix(sequences: list[np.ndarray], n_symbols: int) -> sp.csr_matrix:
    """Document-symbol count matrix (M x V, CSR with sorted indices, int64 counts)."""
    m = len(sequences)
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=m)
    rows = np.repeat(np.arange(m, dtype=np.int64), lengths)
    cols = np.concatenate(sequences)
    counts = sp.csr_matrix((np.ones(len(cols), dtype=np.int64), (rows, cols)), shape=(m, n_symbols))
    counts.sum_duplicates()
    counts.sort_indices()
    return counts


def to_bow_corpus(counts: sp.csr_matrix) -> list[list[tuple[int, int]]]:
    """Gensim bag-of-words corpus ``[[(symbol, count), ...], ...]`` from a count matrix."""
    ind, dat, ptr = counts.indices.tolist(), counts.data.tolist(), counts.indptr.tolist()
    return [list(zip(ind[a:b], dat[a:b])) for a, b in zip(ptr[:-1], ptr[1:])]


def _dirichlet_expectation(a: np.ndarray) -> np.ndarray:
    """E[log x] under Dir(a), row-wise (gensim's ``dirichlet_expectation``)."""
    return psi(a) - psi(a.sum(axis=-1, keepdims=True))


def topic_kl_term(lam: np.ndarray, eta: np.ndarray) -> float:
    """``-sum_k KL(Dir(lambda_k) || Dir(eta_k))``: the corpus-level topic term of the bound.

    ``eta`` of shape (V,) (one prior for all topics) or (K, V).
    """
    lam = np.asarray(lam, dtype=np.float64)
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), lam.shape)
    elog = _dirichlet_expectation(lam)
    return float(
        np.sum((eta - lam) * elog)
        + np.sum(gammaln(lam) - gammaln(eta))
        + np.sum(gammaln(eta.sum(axis=1)) - gammaln(lam.sum(axis=1)))
    )


def _vectorized_inference(model, chunk, collect_sstats=False):
    """gensim's ``LdaModel.inference``, all documents of the chunk advanced at once.

    The same algorithm step by step: gamma starts from the same
    ``random_state.gamma(100, 1/100, (n_docs, K))`` draw; each iteration sets
    ``gamma_d = alpha + expElogtheta_d * ((cts_d / phinorm_d) @ expElogbeta_d.T)``, then
    recomputes ``expElogtheta_d`` and ``phinorm_d = expElogtheta_d @ expElogbeta_d + eps``,
    and a document stops once the mean absolute change of its gamma is below
    ``gamma_threshold`` (or after ``iterations``); the sufficient statistics use each
    document's final ``expElogtheta_d`` and ``phinorm_d``. Only the summation order of the
    dot products differs (results agree to rounding, ~1e-12 relative), but the per-document
    Python loop becomes numpy over all still-running documents.
    """
    try:
        n = len(chunk)
    except TypeError:
        chunk = list(chunk)
        n = len(chunk)
    dtype = model.dtype
    k = model.num_topics
    gamma = model.random_state.gamma(100.0, 1.0 / 100.0, (n, k)).astype(dtype, copy=False)
    doc_len = np.fromiter((len(doc) for doc in chunk), dtype=np.int64, count=n)
    nnz = int(doc_len.sum())
    ids = np.fromiter((int(i) for doc in chunk for i, _ in doc), dtype=np.int64, count=nnz)
    cts = np.fromiter((c for doc in chunk for _, c in doc), dtype=dtype, count=nnz)
    indptr = np.concatenate([[0], np.cumsum(doc_len)])
    n_terms = model.expElogbeta.shape[1]
    eps = np.finfo(dtype).eps
    alpha = np.asarray(model.alpha, dtype=dtype)
    exp_elog_beta_t = np.ascontiguousarray(model.expElogbeta.T)  # (V, K)

    exp_elog_theta = np.exp(_dirichlet_expectation(gamma)).astype(dtype, copy=False)
    phinorm = np.empty(nnz, dtype=dtype)

    # Working set: the documents still iterated, stored contiguously. A document whose
    # gamma has converged is frozen (its values no longer change) and dropped from the
    # working set once a quarter of the set is frozen.
    w_doc = np.arange(n, dtype=np.int64)
    w_len = doc_len
    w_ptr = indptr
    w_ent = np.arange(nnz, dtype=np.int64)  # global entry index of each working entry
    w_ids, w_cts = ids, cts
    w_eb = exp_elog_beta_t[ids]  # (nnz_w, K): expElogbeta[:, w] of every (doc, word) entry
    w_gamma = gamma.copy()
    w_theta = exp_elog_theta.copy()
    w_phinorm = np.einsum("ek,ek->e", np.repeat(w_theta, w_len, axis=0), w_eb) + eps
    live = np.ones(n, dtype=bool)

    def write_back(sel):
        gamma[w_doc[sel]] = w_gamma[sel]
        exp_elog_theta[w_doc[sel]] = w_theta[sel]
        ent_sel = np.repeat(sel, w_len)
        phinorm[w_ent[ent_sel]] = w_phinorm[ent_sel]

    for _ in range(model.iterations):
        n_live = int(live.sum())
        if n_live == 0:
            break
        if n_live < 0.75 * live.size:  # compact the working set
            write_back(~live)
            ent_keep = np.repeat(live, w_len)
            w_doc, w_len = w_doc[live], w_len[live]
            w_ptr = np.concatenate([[0], np.cumsum(w_len)])
            w_ent, w_ids, w_cts = w_ent[ent_keep], w_ids[ent_keep], w_cts[ent_keep]
            w_eb, w_phinorm = w_eb[ent_keep], w_phinorm[ent_keep]
            w_gamma, w_theta = w_gamma[live], w_theta[live]
            live = np.ones(n_live, dtype=bool)
        ratio = sp.csr_matrix((w_cts / w_phinorm, w_ids, w_ptr), shape=(live.size, n_terms))
        new = alpha + w_theta * (ratio @ exp_elog_beta_t)
        change = np.mean(np.abs(new - w_gamma), axis=1)
        new_theta = np.exp(_dirichlet_expectation(new))
        new_phinorm = np.einsum("ek,ek->e", np.repeat(new_theta, w_len, axis=0), w_eb) + eps
        w_gamma = np.where(live[:, None], new, w_gamma)
        w_theta = np.where(live[:, None], new_theta, w_theta)
        w_phinorm = np.where(np.repeat(live, w_len), new_phinorm, w_phinorm)
        live &= ~(change < model.gamma_threshold)
    write_back(np.ones(live.size, dtype=bool))

    sstats = None
    if collect_sstats:
        ratio = sp.csr_matrix((cts / phinorm, ids, indptr), shape=(n, n_terms))
        sstats = np.asarray((ratio.T @ exp_elog_theta).T, dtype=dtype)  # (K, V)
        sstats *= model.expElogbeta
    return gamma, sstats


class FastLdaModel(LdaModel):
    """gensim ``LdaModel`` whose E-step (``inference``) is :func:`_vectorized_inference`."""

    def inference(self, chunk, collect_sstats=False):
        return _vectorized_inference(self, chunk, collect_sstats)


# LDA's max_iter counts per-document inference iterations, not EM iterations: it keeps
# gensim's own schedule (passes=10) whatever --max-iter/--tol say; it takes the restarts.
@register(em_settings=("n_init",))
class LDA(SequenceModel):
    """Latent Dirichlet allocation over bags of symbols (gensim); per-document ELBO score.

    Parameters
    ----------
    n_states : int >= 1
        Number of topics K.
    n_symbols : int, optional
        Vocabulary size V; default max training symbol + 1. Symbols unseen in training keep
        their prior mass (lambda = eta) and score finitely.
    max_iter : int
        Maximum fixed-point iterations of the per-document inference of gamma (gensim's
        ``iterations``), in training and at score time.
    passes : int
        Passes over the training corpus (gensim's ``passes``).
    seed : int
        gensim's ``random_state``; also re-seeds the inference before each scoring call.
    alpha : "auto" | "symmetric" | "asymmetric" | float | array of K
        Document-topic prior; "auto" (default) learns an asymmetric alpha (with one topic
        alpha has no effect and is left at 1).
    eta : None | "auto" | float | array
        Topic-word prior; None is gensim's symmetric ``1 / K``.
    chunksize : int
        Documents per online update (gensim's ``chunksize``).
    update_every : int
        gensim's ``update_every`` (0 = batch updates once per pass).
    decay, offset : float
        gensim's online learning-rate schedule ``(offset + t) ** -decay``.
    gamma_threshold : float
        Convergence threshold of the per-document inference (gensim's ``gamma_threshold``).
    fast_inference : bool
        Run gensim's per-document inference vectorized over documents
        (:class:`FastLdaModel`, same algorithm, same random draws, ~5-10x faster) rather than
        gensim's Python loop over documents (``False``), in training and at score time.
    verbose : bool
        Keep gensim's logging.
    n_init : int
        Restarts: gensim runs with ``random_state`` ``seed``, then seeds derived from
        ``(seed, r)``; the run with the highest training bound (the per-document bounds plus
        the topic term) is kept.

    Attributes
    ----------
    topic_word_ : (K, V) ndarray
        Expected topic-word distributions ``lambda_k / sum(lambda_k)`` under q(beta).
    lambda_ : (K, V) ndarray
        Variational Dirichlet parameters of the topics.
    alpha_ : (K,) ndarray
        Learned document-topic prior.
    eta_ : ndarray
        Topic-word prior used.
    n_symbols_ : int
    model_ : gensim ``LdaModel``
    """

    name = "LDA"
    score_kind = "lower_bound"
    score_family = "LDA (gensim)"

    def __init__(
        self,
        n_states: int,
        n_symbols: int | None = None,
        max_iter: int = 100,
        passes: int = 10,
        seed: int = 0,
        alpha="auto",
        eta=None,
        chunksize: int = 2000,
        update_every: int = 1,
        decay: float = 0.5,
        offset: float = 1.0,
        gamma_threshold: float = 1e-4,
        fast_inference: bool = True,
        verbose: bool = False,
        n_init: int = 1,
    ):
        super().__init__(n_states, seed)
        self.n_symbols = n_symbols
        for nm, v, lo in (
            ("max_iter", max_iter, 1),
            ("passes", passes, 1),
            ("chunksize", chunksize, 1),
            ("update_every", update_every, 0),
            ("n_init", n_init, 1),
        ):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{nm} must be an integer >= {lo}, got {v!r}")
        if not np.isfinite(gamma_threshold) or gamma_threshold < 0:
            raise ValueError(f"gamma_threshold must be a finite number >= 0, got {gamma_threshold!r}")
        self.max_iter = int(max_iter)
        self.passes = int(passes)
        self.alpha = alpha
        self.eta = eta
        self.chunksize = int(chunksize)
        self.update_every = int(update_every)
        self.decay = float(decay)
        self.offset = float(offset)
        self.gamma_threshold = float(gamma_threshold)
        self.fast_inference = bool(fast_inference)
        self.verbose = bool(verbose)
        self.n_init = int(n_init)

    # ------------------------------------------------------------------ fit
    def _fit(self, sequences, n_symbols):
        seeds = derived_seeds(self.seed, self.n_init)

        def run(seed):
            self._fit_once(sequences, n_symbols, seed)
            return self.model_

        # the bound of a run is taken right after it, while it is this model's (score_samples)
        kept, model, _ = best_of(
            [lambda seed=seed: run(seed) for seed in seeds],
            lambda fitted: float(self._score_samples(sequences).sum()) + self.topic_term(),
        )
        if len(seeds) > 1:
            self._set_model(model)
            self.fit_seed_ = seeds[kept]

    def _fit_once(self, sequences, n_symbols, seed):
        cls = FastLdaModel if self.fast_inference else LdaModel
        alpha = self.alpha
        if self.n_states == 1 and isinstance(alpha, str) and alpha == "auto":
            # theta is identically 1 with one topic: alpha has no effect on anything, and
            # gensim's Newton step for it is 0/0 (NaN warnings, then "prior not positive")
            alpha = "symmetric"
        corpus = to_bow_corpus(to_bow_matrix(sequences, n_symbols))
        with quiet_logger("gensim", self.verbose):
            model = cls(
                corpus=corpus,
                num_topics=self.n_states,
                id2word={i: str(i) for i in range(n_symbols)},
                distributed=False,
                chunksize=self.chunksize,
                passes=self.passes,
                update_every=self.update_every,
                alpha=alpha,
                eta=self.eta,
                decay=self.decay,
                offset=self.offset,
                eval_every=None,
                iterations=self.max_iter,
                gamma_threshold=self.gamma_threshold,
                random_state=seed,
                dtype=np.float64,
            )
        self._set_model(model)

    def _set_model(self, model):
        self.model_ = model
        self.lambda_ = np.array(model.state.get_lambda(), dtype=np.float64)
        self.topic_word_ = self.lambda_ / self.lambda_.sum(axis=1, keepdims=True)
        self.alpha_ = np.array(model.alpha, dtype=np.float64)
        self.eta_ = np.array(model.eta, dtype=np.float64)

    # ---------------------------------------------------------------- score
    def _infer_gamma(self, corpus) -> np.ndarray:
        """gensim's per-document inference, re-seeded so that scoring is deterministic."""
        self.model_.random_state = np.random.RandomState(self.seed)
        with quiet_logger("gensim", self.verbose):
            gamma, _ = self.model_.inference(corpus)
        return np.asarray(gamma, dtype=np.float64)

    def variational_gamma(self, sequences) -> np.ndarray:
        """Dirichlet parameters gamma_d of q(theta_d) for each sequence, shape (M, K)."""
        seqs = self._validate_for_score(sequences)
        return self._infer_gamma(to_bow_corpus(to_bow_matrix(seqs, self.n_symbols_)))

    def per_document_bound(self, counts: sp.csr_matrix, gamma: np.ndarray) -> np.ndarray:
        """Per-document part of gensim's bound (see the module docstring), shape (M,).

        ``counts``: document-symbol count matrix (:func:`to_bow_matrix`); ``gamma``: (M, K).
        """
        counts = sp.csr_matrix(counts)
        gamma = np.asarray(gamma, dtype=np.float64)
        m = counts.shape[0]
        alpha = self.alpha_
        elog_theta = _dirichlet_expectation(gamma)  # (M, K)
        elog_beta_t = np.ascontiguousarray(_dirichlet_expectation(self.lambda_).T)  # (V, K)
        coo = counts.tocoo()
        rows, cols, cnt = coo.row, coo.col, coo.data.astype(np.float64)
        words = np.zeros(m, dtype=np.float64)
        step = max(1, (1 << 20) // max(1, self.n_states))
        for a in range(0, len(rows), step):
            r, c = rows[a : a + step], cols[a : a + step]
            lse = logsumexp(elog_theta[r] + elog_beta_t[c], axis=1)
            words += np.bincount(r, weights=cnt[a : a + step] * lse, minlength=m)
        theta = (
            np.sum((alpha - gamma) * elog_theta, axis=1)
            + np.sum(gammaln(gamma) - gammaln(alpha), axis=1)
            + gammaln(alpha.sum())
            - gammaln(gamma.sum(axis=1))
        )
        return words + theta

    def topic_term(self) -> float:
        """The corpus-level topic term ``-sum_k KL(q(beta_k) || p(beta_k))`` left out of scores."""
        self._check_fitted()
        return topic_kl_term(self.lambda_, self.eta_)

    def _score_samples(self, sequences):
        counts = to_bow_matrix(sequences, self.n_symbols_)
        gamma = self._infer_gamma(to_bow_corpus(counts))
        return self.per_document_bound(counts, gamma)
